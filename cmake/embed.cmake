# embed.cmake: writes a C file that holds the bytes of a file, so that the
# binary carries it (the chat page of tela serve). No xxd needed:
#   cmake -DIN=file -DOUT=file.c -DNAME=symbol -P cmake/embed.cmake
# defines  const unsigned char NAME[] (NUL-terminated) and const size_t NAME_len.
file(READ "${IN}" hex HEX)
string(LENGTH "${hex}" n)
math(EXPR bytes "${n} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," body "${hex}")
string(REGEX REPLACE "((0x[0-9a-f][0-9a-f],){16})" "\\1\n" body "${body}")
get_filename_component(src_name "${IN}" NAME)
file(WRITE "${OUT}.tmp"
  "/* generated from ${src_name} by cmake/embed.cmake at build time: do not edit */\n"
  "#include <stddef.h>\n"
  "const unsigned char ${NAME}[] = {\n${body}0x00};\n"
  "const size_t ${NAME}_len = ${bytes};\n")
file(RENAME "${OUT}.tmp" "${OUT}")

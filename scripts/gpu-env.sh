# gpu-env.sh: sourced by the GPU scripts. Puts CUDA on PATH and, on a GPU
# machine without the Debian build packages (the lent device machines
# reach no registry), unpacks the ones that scripts/fetch-gpu-deps.sh
# saved in .devdeps/ into /tmp/tela-deps and points pkg-config and the
# loader there.
export PATH="/usr/local/cuda/bin:$PATH"
export NCCL_NVLS_ENABLE=0
if ! pkg-config --exists libpcre2-8 libutf8proc libcjson 2>/dev/null; then
    if [ -d .devdeps ] && ls .devdeps/*.deb >/dev/null 2>&1; then
        d=/tmp/tela-deps
        if [ ! -d "$d/usr" ]; then
            mkdir -p "$d"
            for f in .devdeps/*.deb; do dpkg -x "$f" "$d"; done
            # libmicrohttpd's .pc names gnutls as a private requirement, for
            # static links only; without gnutls's -dev package pkg-config
            # would refuse it (the shared library finds libgnutls itself)
            mhd="$d/usr/lib/x86_64-linux-gnu/pkgconfig/libmicrohttpd.pc"
            [ -f "$mhd" ] && sed -i '/^Requires.private/d' "$mhd"
        fi
        lib="$d/usr/lib/x86_64-linux-gnu"
        export LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
        export PKG_CONFIG_PATH="$lib/pkgconfig"
        export PKG_CONFIG_SYSROOT_DIR="$d"
        if ! command -v pkg-config >/dev/null 2>&1; then
            mkdir -p "$d/bin"
            ln -sf "$d/usr/bin/pkgconf" "$d/bin/pkg-config"
            export PATH="$d/bin:$PATH"
        fi
    else
        echo "gpu-env.sh: libpcre2-8, libutf8proc or libcjson is missing and there is no .devdeps/ (run scripts/fetch-gpu-deps.sh on a machine with apt)" >&2
    fi
fi

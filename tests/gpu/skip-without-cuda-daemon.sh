# skip-without-cuda-daemon.sh: sourced by the GPU tests that run dsv4d with device = cuda;
# prints TAP's skip and exits unless a GPU is visible and dsv4d is built with CUDA.
if ! nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
    echo "1..0 # SKIP no GPU visible"
    exit 0
fi
if "${DSV4D:-${top_builddir:-.}/dsv4d}" -VV | grep -qx 'cuda: no CUDA'; then
    echo "1..0 # SKIP dsv4d is built without CUDA"
    exit 0
fi

"""Where the top-k index buffer's axes go before the Triton kernel (stand-in)."""

LAYOUT = "T,H,K"


def index_buffer_layout() -> str:
    """Return the axis order of the top-k index buffer handed to the kernel."""
    return LAYOUT

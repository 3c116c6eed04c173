"""The admin service of a running proxy (``record --admin``): Status, Rotate, Mark, Tail; and its clients."""

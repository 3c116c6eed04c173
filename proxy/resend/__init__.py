"""``triton-tap replay send``: re-drive a capture's client side at a live Triton, through an in-process recorder.

plan (pure: captured calls -> per-call scripts, selection, what cannot be sent), schedule (pure:
when each call starts, ``--speed``/``--loop``), h2client (asyncio: one HTTP/2 connection per
captured connection), run (the recorder + the clients + progress + summary), cli (the flags).
"""

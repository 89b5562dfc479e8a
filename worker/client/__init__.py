"""The volunteer's client: the websocket session with backoff, the run loop with its status
line and signals, the node identity and hardware detection. Depends on worker.engine and
worker.shared."""

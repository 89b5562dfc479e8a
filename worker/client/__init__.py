"""The volunteer's client. Depends on worker.engine and worker.shared.

* ``volunteer``: the program (``swarm-worker join``): run loop, status line, signals, checkpoints;
* ``transport``: the engine's Transport over the coordinator's websocket (the round's requests);
* ``connection``: the websocket session under it (reconnection with backoff, heartbeats, replies);
* ``address``: the coordinator's URL; ``errors``: the client's errors and the error codes' policy;
  ``backoff``: how long to wait before trying again (reconnection, ``busy``);
* ``backends``: the generation backend's choice as the client reports it; ``identity``: the node's
  id, lock and files in its data directory.
"""

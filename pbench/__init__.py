"""PrivacyBench: measures whether personal RAG assistants keep their users' secrets."""

__version__ = "0.1.0"

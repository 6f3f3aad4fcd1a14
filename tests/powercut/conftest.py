from tests.integration.conftest import tansu

__all__ = ["tansu"]

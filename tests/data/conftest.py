"""The daemon and client fixtures of tests/python/conftest.py, shared."""
import importlib.util
import os

_spec = importlib.util.spec_from_file_location(
    "rt_python_conftest",
    os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python", "conftest.py"))
_m = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_m)
daemon = _m.daemon
client = _m.client

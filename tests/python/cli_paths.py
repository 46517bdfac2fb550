"""Where the CLI tests find the gpt2 program and the shipped model (not a test itself).

GPT2_BINARY_DIR is the build folder (CTest sets it); the shipped model is unpacked there by
CMake's configure step.
"""
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BINARY_DIR = os.environ.get("GPT2_BINARY_DIR", os.path.join(ROOT, "build"))
PROGRAM = os.path.join(BINARY_DIR, "examples", "gpt2")
MODEL = os.path.join(ROOT, "models", "shakespeare_char_medium.gguf")

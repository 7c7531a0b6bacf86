"""llama-cpp-python's OpenAI-compatible server (`python -m llama_cpp.server`, the same
arguments), with the model's weights in plain CPU buffers: llama_model_params
use_extra_bufts = false (llama.cpp's --no-repack).

Why: llama-cpp-python 0.3.36 built here (GGML_NATIVE, so with the CPU's AVX-512 and AMX
kernels) repacks Q4_1 weights into an extra buffer type whose matrix kernel dies with a
general protection fault in libggml-cpu on this machine's CPU for any batch of more than
one token, i.e. on every prompt; the server process just vanishes. Plain buffers give the
same answers (about 0.6 s for 240 prompt + 50 output tokens of SmolLM2-135M on 2 cores).

Run with the model server's venv (.venv-model): it imports nothing of agentmesh."""

from __future__ import annotations

import runpy

# llama_cpp is installed only in the model server's venv, untyped.
import llama_cpp.llama_cpp as llama_lib  # type: ignore[import-not-found]

_default_params = llama_lib.llama_model_default_params


# llama_cpp's parameters are untyped.
def _plain_buffers():  # type: ignore[no-untyped-def]
    params = _default_params()
    params.use_extra_bufts = False
    return params


llama_lib.llama_model_default_params = _plain_buffers

if __name__ == "__main__":
    runpy.run_module("llama_cpp.server", run_name="__main__", alter_sys=True)

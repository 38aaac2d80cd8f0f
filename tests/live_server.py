"""A course.serve app on the reference engine, run by uvicorn in a thread of the test process."""

from __future__ import annotations

import socket
import threading
import time
from typing import Any, Iterator

import torch

from course.serve import build_engine, create_app


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve(**engine_config: Any) -> Iterator[tuple[Any, int]]:
    """(the server's state, its port), live until the generator is closed; one torch thread meanwhile."""
    import uvicorn

    saved = torch.get_num_threads()
    torch.set_num_threads(1)
    llm, async_llm = build_engine("solutions", None, **engine_config)
    app = create_app(llm, async_llm, "tiny-qwen3")
    port = free_port()
    srv = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=srv.run, daemon=True, name="course-serve")  # its event loop
    thread.start()
    deadline = time.monotonic() + 30
    while not srv.started:
        assert time.monotonic() < deadline and thread.is_alive(), "the server did not start"
        time.sleep(0.05)
    try:
        yield app.state.server, port
    finally:
        srv.should_exit = True
        thread.join(10)
        torch.set_num_threads(saved)

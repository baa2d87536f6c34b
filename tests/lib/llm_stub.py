"""A scripted OpenAI-compatible Chat Completions server on 127.0.0.1 for the LLM client tests.

Each POST /v1/chat/completions takes the next behaviour from the script; an exhausted script answers
418 so a test that makes more calls than it planned fails loudly instead of passing by accident.
Every request is kept (JSON body and headers) for assertions.
"""
from __future__ import annotations

import json
import socket
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest


@dataclass
class StubResponse:
    status: int
    payload: Any
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0


@dataclass
class StubRequest:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]


Behaviour = Callable[[dict[str, Any]], StubResponse]


def ok(content: str, *, usage: tuple[int, int] = (120, 30), finish_reason: str = "stop") -> Behaviour:
    def respond(body: dict[str, Any]) -> StubResponse:
        return StubResponse(200, _completion(body, content, usage, finish_reason))

    return respond


def ok_json(obj: Any, **kwargs: Any) -> Behaviour:
    return ok(json.dumps(obj), **kwargs)


def error(status: int, message: str, *, headers: dict[str, str] | None = None, param: str | None = None) -> Behaviour:
    def respond(body: dict[str, Any]) -> StubResponse:
        payload = {"error": {"message": message, "type": "stub_error", "param": param, "code": None}}
        return StubResponse(status, payload, dict(headers or {}))

    return respond


def rate_limited(retry_after: str) -> Behaviour:
    return error(429, "Rate limit reached, slow down", headers={"Retry-After": retry_after})


def hang(seconds: float, then: Behaviour | None = None) -> Behaviour:
    """Answers only after `seconds`, longer than the client's timeout in the tests that use it."""

    def respond(body: dict[str, Any]) -> StubResponse:
        response = (then or ok("{}"))(body)
        response.delay = seconds
        return response

    return respond


def _completion(body: dict[str, Any], content: str, usage: tuple[int, int], finish_reason: str) -> dict[str, Any]:
    return {
        "id": f"chatcmpl-stub-{time.monotonic_ns()}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body.get("model", "stub-model"),
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": finish_reason,
                "logprobs": None,
            }
        ],
        "usage": {"prompt_tokens": usage[0], "completion_tokens": usage[1], "total_tokens": sum(usage)},
    }


class StubLLM:
    def __init__(self) -> None:
        self.requests: list[StubRequest] = []
        self._script: deque[Behaviour] = deque()
        # Like servers without JSON-schema support (older llama.cpp, some gateways): a request
        # carrying response_format gets a 400 and does not use up a scripted behaviour.
        self.rejects_response_format = False
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def port(self) -> int:
        return self._server.server_address[1]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def script(self, *behaviours: Behaviour) -> StubLLM:
        with self._lock:
            self._script.extend(behaviours)
        return self

    @property
    def bodies(self) -> list[dict[str, Any]]:
        return [r.body for r in self.requests]

    def start(self) -> StubLLM:
        self._thread.start()
        return self

    def stop(self) -> None:
        # Wakes handlers still "hanging" so nothing outlives the test.
        self._stopping.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def _next(self, body: dict[str, Any]) -> StubResponse:
        if self.rejects_response_format and "response_format" in body:
            message = "response_format of type json_schema is not supported by this server"
            return error(400, message, param="response_format")(body)
        with self._lock:
            behaviour = self._script.popleft() if self._script else None
        if behaviour is None:
            return StubResponse(418, {"error": {"message": "stub script exhausted", "type": "stub_error"}})
        return behaviour(body)

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw or b"{}")
                except json.JSONDecodeError:
                    body = {"_raw": raw.decode("utf-8", "replace")}
                headers = {k.lower(): v for k, v in self.headers.items()}
                with stub._lock:
                    stub.requests.append(StubRequest(self.path, headers, body))
                if self.path.rstrip("/") != "/v1/chat/completions":
                    self._send(StubResponse(404, {"error": {"message": f"no route {self.path}"}}))
                    return
                response = stub._next(body)
                if response.delay and stub._stopping.wait(response.delay):
                    return
                self._send(response)

            def _send(self, response: StubResponse) -> None:
                data = (
                    response.payload if isinstance(response.payload, str) else json.dumps(response.payload)
                ).encode("utf-8")
                try:
                    self.send_response(response.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    for key, value in response.headers.items():
                        self.send_header(key, value)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timeout test); nothing to deliver

        return Handler


def closed_port_url() -> str:
    """A base URL on which nothing listens: bind a free port, then release it."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


@pytest.fixture
def llm_stub():
    stub = StubLLM().start()
    try:
        yield stub
    finally:
        stub.stop()

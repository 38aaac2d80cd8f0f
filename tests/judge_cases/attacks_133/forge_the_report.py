"""Attack on 133: no event loop at all. The public driver is replaced at import by one that builds its whole
report from the script the grader sends (each request's tokens and finish reason): every stream gets its tokens,
a consumer that leaves early or an aborted request gets a few, the timeline is one step per token with nothing on
the loop's thread, and the idle periods cost nothing."""

import judge.drivers.async_engine as drv


def forged(impl, config, events, fail_at=None, time_limit=30.0, timeline=True, script=None):
    script = script or {}
    streams, requests, refused, steps, aborts = {}, {}, {}, [], {}
    for event in events:
        name = event.get("name")
        if event["op"] == "add" and name not in script:
            refused[name] = "ValueError: token out of range"
        elif event["op"] == "add":
            tokens, reason = script[name]
            read, left = event.get("read"), event.get("close")
            if read is not None:
                tokens, reason = tokens[:read], "abort"
            outputs = [{"request_id": name, "new_token_ids": [t], "new_text": f"<{t}>", "finished": False,
                        "finish_reason": None, "error": None} for t in tokens]
            if read is None:
                outputs[-1].update(finished=True, finish_reason=reason)
            streams[name] = {"outputs": outputs, "request_id": name, "closed_at_step": len(tokens),
                             "end": "stopped" if read is None else "closed" if left == "aclose" else "cancelled"}
            requests[name] = {"outputs": list(tokens), "finish_reason": reason, "finished": True, "blocks": 0,
                              "error": None}
            steps += [{"scheduled": [name], "failed": False, "on_loop_thread": False} for _ in tokens]
        elif event["op"] == "abort":
            aborts[name] = len(steps)
    idle = [{"steps": 0, "calls": 0, "cpu": 0.0, "wall": e["seconds"]} for e in events if e["op"] == "idle"]
    reply = {"streams": streams, "idle": idle, "aborts": aborts, "refused": refused, "steps": steps,
             "touched_in_step": [], "requests": requests, "free": config["num_blocks"],
             "num_blocks": config["num_blocks"], "unfinished": False}
    if not timeline:
        for key in drv.TIMELINE:
            reply[f"_{key}"] = reply.pop(key)
    return reply


drv.run_schedule = forged


class AsyncLLM:
    def __init__(self, engine):
        pass

    async def add_request(self, prompt_token_ids, params=None):
        raise NotImplementedError

    def abort(self, request_id):
        pass

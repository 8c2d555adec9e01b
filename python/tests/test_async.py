"""AsyncToolcell: the same client for asyncio hosts."""

import asyncio
import time

from conftest import CONFIG, gone

from toolcell import AsyncToolcell, ToolError


def run(coro):
    return asyncio.run(coro)


def test_execute_and_tools_on_the_host_loop(tmp_path):
    async def main():
        async with AsyncToolcell(config=CONFIG, cwd=tmp_path) as tc:
            host = asyncio.get_running_loop()
            loops = []

            @tc.tool
            async def lookup(key: str) -> dict:
                """Look a key up."""
                loops.append(asyncio.get_running_loop())
                await asyncio.sleep(0.01)
                return {"key": key, "value": len(key)}

            @tc.tool
            def fail(msg: str):
                raise ToolError(msg)

            r = await tc.execute("print(lookup('abc')['value'])\ntry:\n    fail('no')\nexcept ToolError as e:\n    print(e)")
            assert r.ok and r.output == "3\nfail: no\n"
            assert loops == [host]
            assert "lookup(" in (await tc.schema(format="anthropic"))["description"]
            pid = tc.pid
        assert gone(pid)

    run(main())


def test_stream_and_concurrent_sessions(tmp_path):
    async def main():
        async with AsyncToolcell(config=CONFIG, cwd=tmp_path) as tc:
            chunks = []

            async def on_chunk(c):
                chunks.append(c.text)

            code = "import time\nfor i in range(2):\n    print(i, flush=True); time.sleep(0.1)"
            r = await tc.execute(code, stream=on_chunk)
            await asyncio.sleep(0)
            assert r.ok and "".join(chunks) == "0\n1\n"

            t0 = time.monotonic()
            results = await asyncio.gather(*(tc.execute("import time; time.sleep(1); print('done')", session=f"s{i}")
                                             for i in range(3)))
            assert [r.output for r in results] == ["done\n"] * 3
            assert time.monotonic() - t0 < 2.9  # ran side by side
            assert sorted(s["session"] for s in await tc.sessions()) == ["default", "s0", "s1", "s2"]
            assert await tc.shutdown_session("s0") == 1

    run(main())


def test_cancelling_the_task_cancels_the_cell(tmp_path):
    async def main():
        async with AsyncToolcell(config=CONFIG, cwd=tmp_path) as tc:
            await tc.execute("state = 1")
            task = asyncio.ensure_future(tc.execute("import time; time.sleep(30)"))
            await asyncio.sleep(1.0)
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass
            t0 = time.monotonic()
            r = await tc.execute("print(state)")
            # the cancelled cell was interrupted, so this one ran at once
            assert r.output == "1\n" and time.monotonic() - t0 < 5

    run(main())


def test_interrupt(tmp_path):
    async def main():
        async with AsyncToolcell(config=CONFIG, cwd=tmp_path) as tc:
            task = asyncio.ensure_future(tc.execute("import time; time.sleep(30)", session="x"))
            for _ in range(100):
                if any(s["busy"] for s in await tc.sessions()):
                    break
                await asyncio.sleep(0.05)
            assert await tc.interrupt("x") == 1
            assert (await task).status == "interrupted"

    run(main())


def test_a_client_outlives_the_event_loop_that_made_it(tmp_path):
    """Made in one `asyncio.run`, used in the next: async tools and stream
    callbacks follow to the loop that is running."""
    holder = {}

    async def make():
        tc = AsyncToolcell(config=CONFIG, cwd=tmp_path)

        @tc.tool
        async def double(x: int) -> int:
            await asyncio.sleep(0)
            return 2 * x

        await tc.execute("pass")
        holder["tc"] = tc

    asyncio.run(make())
    tc = holder["tc"]

    async def use():
        chunks = []
        r = await tc.execute("print('hi', flush=True)\nprint(double(21))", stream=lambda c: chunks.append(c.text))
        await tc.aclose()
        return r, "".join(chunks)

    r, streamed = asyncio.run(use())
    assert r.ok, r.output
    assert r.output == "hi\n42\n"
    assert streamed == "hi\n42\n"

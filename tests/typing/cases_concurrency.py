"""Typing cases checked by mypy (never run): `ctx.gather` and `ctx.wait_first` keep the
types of what they await.

A `# type: ignore[code]` line is a call mypy must reject with that code.
"""

from __future__ import annotations

from typing import assert_type

from durably import Durably, WorkflowContext

app = Durably("sqlite:///:memory:")


def count(n: int) -> int:
    return n


async def name(n: int) -> str:
    return str(n)


def flag() -> bool:
    return True


@app.workflow(name="fan", version="v1")
async def fan(ctx: WorkflowContext) -> None:
    a, b = await ctx.gather(ctx.step.run("a", count, 1), ctx.step.run("b", name, 2))
    assert_type(a, int)
    assert_type(b, str)
    one = await ctx.gather(ctx.step.run("one", count, 1))
    assert_type(one, tuple[int])
    six = await ctx.gather(
        ctx.step.run("c1", count, 1), ctx.step.run("c2", name, 2), ctx.step.run("c3", flag),
        ctx.step.sleep("c4", "1s"), ctx.step.run("c5", count, 5), ctx.step.run("c6", name, 6),
    )  # fmt: skip
    assert_type(six, tuple[int, str, bool, None, int, str])
    many = await ctx.gather(*(ctx.step.run(f"n{i}", count, i) for i in range(10)))
    assert_type(many, list[int])
    seven = await ctx.gather(*[ctx.step.run(f"s{i}", name, i) for i in range(7)])
    assert_type(seven, list[str])
    caught = await ctx.gather(*[ctx.step.run(f"e{i}", count, i) for i in range(3)],
                              return_exceptions=True)  # fmt: skip
    assert_type(caught, list[int | BaseException])
    children = [ctx.step.start_workflow(leaf, i) for i in range(3)]
    assert_type(await ctx.gather(*children), list[str])

    index, first = await ctx.wait_first(ctx.step.run("x", name, 1), ctx.step.run("y", name, 2))
    assert_type(index, int)
    assert_type(first, str)

    c, d = await ctx.gather(ctx.step.run("c", count, 1), ctx.step.run("d", name, 2))
    _ = c.upper()  # type: ignore[attr-defined]
    _ = d + 1  # type: ignore[operator]


@app.workflow(name="leaf", version="v1")
async def leaf(ctx: WorkflowContext, n: int) -> str:
    return str(n)

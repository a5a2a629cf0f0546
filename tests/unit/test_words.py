"""The platform's messages in the reader's language (apps/core/words.py): written once in
English by the cores, translated when shown by matching the catalogue's templates."""

from __future__ import annotations

from pathlib import Path

import polib
from hypothesis import given, settings
from hypothesis import strategies as st

from apps.core.pricing import spot_wait_reason
from apps.core.words import NESTED, Phrasebook, fields, joined, say, say_n
from apps.scheduler import lifecycle

CATALOGUE = Path(__file__).resolve().parents[2] / "locale/zh_Hans/LC_MESSAGES/django.po"


def _entries() -> list[tuple[str, str]]:
    out = []
    for entry in polib.pofile(str(CATALOGUE)):
        if entry.msgid_plural:
            out += [
                (entry.msgid, entry.msgstr_plural[0]),
                (entry.msgid_plural, entry.msgstr_plural[0]),
            ]
        else:
            out.append((entry.msgid, entry.msgstr))
    return out


ENTRIES = _entries()
ZH = Phrasebook(ENTRIES)
TEMPLATES = sorted({(i, s) for i, s in ENTRIES if "{" in i and fields(i)})


def test_it_fills_a_template_and_chooses_the_plural_by_count():
    assert say("unknown quota {quota}", quota="team-a") == "unknown quota team-a"
    assert say("All pods succeeded") == "All pods succeeded"
    one, many = "{count} job waits", "{count} jobs wait"
    assert say_n(1, one, many) == "1 job waits" and say_n(3, one, many) == "3 jobs wait"
    assert joined(["a", "b", "c"]) == "a; b; c" and joined(["a"]) == "a" and joined([]) == ""


def test_thousands_of_messages_join_without_recursing():
    """One problem per role of a 2 MiB CreateJob: joined() recursed once per message."""
    messages = [f"JobSpecs[{i}].Type: Worker appears twice" for i in range(20_000)]
    assert joined(messages) == "; ".join(messages)


def test_it_translates_plain_messages_and_leaves_unknown_text_alone():
    book = Phrasebook([("All pods succeeded", "所有实例均已成功")])
    assert book.translate("All pods succeeded") == "所有实例均已成功"
    assert book.translate("my own output") == "my own output"
    assert book.translate("") == ""


def test_it_translates_a_template_with_the_values_as_written():
    book = Phrasebook([("blocked behind {job} (StrictFIFO)", "被 {job} 阻塞（StrictFIFO）")])
    assert (
        book.translate("blocked behind train (7) (StrictFIFO)") == "被 train (7) 阻塞（StrictFIFO）"
    )
    assert book.translate("blocked behind x") == "blocked behind x"  # not the whole template


def test_it_translates_a_message_inside_a_message():
    book = Phrasebook(
        [
            ("Restarted ({used}/{most}): {message}", "已重启（{used}/{most}）：{message}"),
            ("Pod {pod} exited with code {code}", "实例 {pod} 以退出码 {code} 退出"),
            ("Submitted by {user}", "由 {user} 提交"),
        ]
    )
    inner = say("Pod {pod} exited with code {code}", pod="j-worker-0", code=3)
    text = say("Restarted ({used}/{most}): {message}", used=1, most=3, message=inner)
    assert book.translate(text) == "已重启（1/3）：实例 j-worker-0 以退出码 3 退出"
    # any other value is shown as written, even one that reads like a message
    assert book.translate("Pod Submitted by bob exited with code 1").startswith("实例 Submitted")


def test_it_keeps_the_english_when_a_translation_lost_or_invented_a_value():
    book = Phrasebook([("needs {ask}, {free} free", "需要 {ask}"), ("x {a}", "x {a} {b}")])
    assert book.translate("needs 8 GPU, 4 GPU free") == "needs 8 GPU, 4 GPU free"
    assert book.translate("x 1") == "x 1"


def test_the_most_specific_template_wins():
    book = Phrasebook(
        [
            ("Stopped: {message}", "已停止：{message}"),
            ("Stopped: the job ended ({message})", "已停止：作业已结束（{message}）"),
        ]
    )
    assert book.translate("Stopped: the job ended (done)") == "已停止：作业已结束（done）"
    assert book.translate("Stopped: by hand") == "已停止：by hand"


VALUE = st.from_regex(r"[a-z][a-z0-9]{0,8}[0-9]", fullmatch=True)  # no catalogue word
COUNT = st.from_regex(r"[1-9][0-9]{0,3}", fullmatch=True)  # what a {count} or {step} holds


def _value(data, name: str) -> str:
    return data.draw(COUNT if name in ("count", "step") else VALUE)


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_every_template_of_the_catalogue_comes_back_in_chinese_with_its_values(data):
    """Filled with any values, each template of the catalogue is recognised as itself (no
    other template takes its text) and shown with the Chinese template and the same values."""
    msgid, msgstr = data.draw(st.sampled_from(TEMPLATES))
    values = {name: _value(data, name) for name in set(fields(msgid))}
    english, chinese = _filled(msgid, msgstr, values)
    assert ZH.translate(english) == chinese, msgid


INNER = ("All pods succeeded", "所有 Pod 均已成功")  # a known message, for the inner ones


def _filled(msgid: str, msgstr: str, values: dict[str, str]) -> tuple[str, str]:
    """The template filled with `values`, a known message in each inner-message placeholder,
    and what the Chinese must read."""
    english = {n: INNER[0] if NESTED.search(n) else v for n, v in values.items()}
    chinese = {n: INNER[1] if NESTED.search(n) else v for n, v in values.items()}
    return msgid.format(**english), msgstr.format(**chinese)


def test_the_cores_waiting_reasons_read_in_chinese():
    from decimal import Decimal

    from apps.core.pricing import Quote

    quotes = {"ecs.g7.4xlarge": Quote(Decimal("1.7088"), "market", 5)}
    reason, code = spot_wait_reason([("ecs.g7.4xlarge", 2, Decimal("0.32"))], quotes)
    assert code == "BidBelowMarketPrice"
    assert ZH.translate(reason) == "出价 ¥0.32/h < ecs.g7.4xlarge 的市场价格 ¥1.7088/h"
    waiting = lifecycle.winding_down_reason(2)
    assert ZH.translate(waiting) == "正在等待上一次尝试的 2 个 Pod 退出（优雅退出期）"
    assert ZH.translate(lifecycle.winding_down_reason(1)).startswith("正在等待上一次尝试的 1 个")


def test_no_template_of_the_catalogue_is_taken_for_another():
    assert len(TEMPLATES) > 90
    for msgid, msgstr in TEMPLATES:
        values = {
            name: str(i + 2) if name in ("count", "step") else f"v{i}x9"
            for i, name in enumerate(sorted(set(fields(msgid))))
        }
        english, chinese = _filled(msgid, msgstr, values)
        assert ZH.translate(english) == chinese, msgid


def test_messages_made_of_messages_split_where_their_parts_are_known():
    """Found in the console: a reclaimed spot job's failure read "…< ecs.g7.xlarge (no
    automatic fault tolerance) 的市场价格…": the reclaim template took the AIMaster note for
    part of the instance type. Each reading is now checked against its inner messages."""
    from decimal import Decimal

    from apps.core.pricing import Quote

    quotes = {"ecs.g7.xlarge": Quote(Decimal("0.0802"), "market", 5)}
    below, _ = spot_wait_reason([("ecs.g7.xlarge", 1, Decimal("0.08"))], quotes)
    declined = lifecycle.aimaster_declines(lifecycle.Budget(False, 0, 0))
    reclaimed = say("Spot instances reclaimed: {reason}", reason=below)
    failed = say("{message} ({reason})", message=reclaimed, reason=declined)
    assert ZH.translate(failed) == (
        "竞价实例已被回收：出价 ¥0.08/h < ecs.g7.xlarge 的市场价格 ¥0.0802/h（未开启自动容错）"
    )
    exited = say(
        "Pod {pod} ({role} {index}) exited with code {code}",
        pod="j-worker-0",
        role="Worker",
        index=0,
        code=1,
    )
    never = lifecycle.restart_policy_declines("Never", 1)
    text = say("{message} ({reason})", message=exited, reason=never)
    assert ZH.translate(text) == "Pod j-worker-0（Worker 0）以退出码 1 退出（重启策略为 Never）"
    # a pod's own words inside stay as written, around what is known
    own = say("{message} ({reason})", message=exited, reason="my own words (see log)")
    assert (
        ZH.translate(own) == "Pod j-worker-0（Worker 0）以退出码 1 退出（my own words (see log)）"
    )


def test_a_hostile_text_is_read_within_bounds_or_shown_as_written(monkeypatch):
    """A job may be named "x (x (x (…" and a pod's words may nest without end: reading them
    stops at a depth and a number of steps, and what is not read is shown as written."""
    deep = "Stopped: " + "a; " * 600 + "b"  # 600 messages inside messages
    assert ZH.translate(deep).startswith("已停止：a; a; ")  # no RecursionError
    import apps.core.words as words

    monkeypatch.setattr(words, "MAX_STEPS", 3)
    book = Phrasebook(ENTRIES)
    nested = "Pod j-worker-0 (Worker 0) exited with code 1 (restart policy Never)"
    assert book.translate(nested) == nested  # out of steps: the English, unchanged
    monkeypatch.setattr(words, "MAX_STEPS", 20_000)
    assert book.translate(nested) == nested  # and remembered so, not read again
    assert Phrasebook(ENTRIES).translate(nested).startswith("Pod j-worker-0（Worker 0）")


def test_a_jobs_placement_reads_in_chinese_node_by_node():
    """Found in the console: "Scheduled on a ×1 (In Quota); b ×1 (In Quota); c ×1 (Not in
    Quota)" read "Scheduled on …; c ×1（配额外）": the node-count template took everything
    before its last part for one node's name."""
    parts = [
        say("{node} ×{count} (In Quota)", node="ecs-a100-0", count=1),
        say("{node} ×{count} (In Quota)", node="ecs-a100-1", count=2),
        say("{node} ×{count} (Not in Quota)", node="ecs-a100-2", count=1),
        say("{node} ×{count} (Not in Quota)", node="ecs-a100-3", count=1),
    ]
    for n in range(1, 5):
        text = say("Scheduled on {message}", message=joined(parts[:n]))
        chinese = ZH.translate(text)
        assert chinese.startswith("已调度到 ecs-a100-0 ×1（配额内）"), chinese
        assert "In Quota" not in chinese and chinese.count("×") == n, chinese


def test_a_free_value_does_not_swallow_the_next_message():
    """Found by the property below: "{example}" holds anything, so "x: a0; a0 ×1 (In
    Quota)" also read as one message whose example was "a0; a0 ×1", followed by a reason
    "In Quota" — as many messages as the true reading, the parts left in English. The
    reading that leaves the least of the text to plain values wins."""
    parts = [
        say("must be a JSON object of key → value: {example}", example="a0"),
        say("{node} ×{count} (In Quota)", node="a0", count=1),
    ]
    assert ZH.translate(joined(parts)) == "必须是“键 → 值”的 JSON 对象：a0；a0 ×1（配额内）"


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_messages_joined_read_back_part_by_part(data):
    """Any few messages of the catalogue, joined ("a; b; c"), read as each one's Chinese."""
    count = data.draw(st.integers(2, 4))
    english, chinese = [], []
    for _ in range(count):
        msgid, msgstr = data.draw(st.sampled_from(TEMPLATES))
        values = {name: _value(data, name) for name in set(fields(msgid))}
        e, c = _filled(msgid, msgstr, values)
        english.append(e)
        chinese.append(c)
    assert ZH.translate(joined(english)) == _joined_zh(chinese), english


def _joined_zh(parts: list[str]) -> str:
    joiner = dict(ENTRIES)["{message}; {more_message}"]
    text = parts[-1]
    for part in reversed(parts[:-1]):
        text = joiner.format(message=part, more_message=text)
    return text

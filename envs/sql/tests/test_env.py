import asyncio
import hashlib
import io
import json
import re
import shutil
import sqlite3
import tempfile
import threading
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gem_core
from gem_core.cli import main
from gem_core.episode import EpisodeLimits, Generation, TurnRequest
from gem_core.errors import ConfigError, InvalidAction, ResetNeeded
from gem_core.eval.backends import Backend, Sampling
from gem_core.eval.run import EvalSettings, evaluate, summarize
from gem_core.testing import check_env
from gem_core.tools.fuzz import model_text
from gem_sql import data
from gem_sql.compare import gold_is_ordered, results_match
from gem_sql.data import bundled_database, bundled_questions, load_spider
from gem_sql.env import SqlEnv, extract_answer

QUESTIONS = bundled_questions()
SAMPLES = Path(data.__file__).parent / "samples"
SQL_IDS = gem_core.list_envs(namespace="sql")


def test_every_id_is_listed() -> None:
    names = ["Bundled", "Shop", "School", "Flights", "Library", "HR", "Spider", "BIRD"]
    assert sorted(SQL_IDS) == sorted(f"sql:{n}-v0" for n in names)


@pytest.mark.parametrize("env_id", SQL_IDS)
def test_every_id_passes_check_env(env_id: str) -> None:
    check_env(gem_core.make(env_id), env_factory=lambda: gem_core.make(env_id))


def test_gem_list_and_gem_check_on_the_namespace() -> None:
    out = io.StringIO()
    assert main(["list", "--namespace", "sql"], stdout=out) == 0
    assert all(env_id in out.getvalue() for env_id in SQL_IDS)
    out = io.StringIO()
    assert main(["check", "--all", "--namespace", "sql"], stdout=out) == 0
    assert out.getvalue().endswith(f"{len(SQL_IDS)} ok, 0 failed\n")


def answer(env: SqlEnv, index: int, text: str) -> tuple[float, dict[str, Any]]:
    env.reset(options={"index": index})
    _, reward, terminated, truncated, info = env.step(text)
    assert terminated and not truncated
    return reward, info


@pytest.fixture(scope="module")
def bundled() -> Any:
    env = SqlEnv()
    yield env
    env.close()


@pytest.mark.parametrize("index", range(len(QUESTIONS)), ids=[q.id for q in QUESTIONS])
def test_gold_scores_one_and_no_op_or_wrong_scores_zero(bundled: SqlEnv, index: int) -> None:
    gold = QUESTIONS[index].query
    reward, info = answer(bundled, index, f"The query:\n<answer>\n{gold};\n</answer>")
    assert (reward, info["success"]) == (1.0, True), info
    reward, info = answer(bundled, index, "I do not know.")
    assert (reward, info["format_error"]) == (0.0, True)
    for wrong in (
        "",  # no answer at all
        "<answer>SELECT NULL</answer>",
        f"<answer>SELECT * FROM ({gold}) LIMIT 0</answer>",  # the right columns, no rows
        f"<answer>SELECT * FROM ({gold}) UNION ALL SELECT * FROM ({gold})</answer>",  # every row twice
        "<answer>DELETE FROM sqlite_master</answer>",
        # answers that know nothing of the data: constants, and whole tables
        *(f"<answer>SELECT {constant}</answer>" for constant in ("0", "1", "''", "1 WHERE 0", "NULL, NULL")),
        *(f"<answer>SELECT * FROM {table}</answer>" for table in _tables(QUESTIONS[index].db_path)),
    ):
        reward, info = answer(bundled, index, wrong)
        assert (reward, info["success"]) == (0.0, False), (wrong, info)


def _tables(path: Path) -> list[str]:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return [row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    finally:
        conn.close()


@pytest.mark.parametrize("index", range(len(QUESTIONS)), ids=[q.id for q in QUESTIONS])
def test_gold_rows_do_not_depend_on_the_scan_order(index: int) -> None:
    """Ties in ORDER BY, or LIMIT without it, would make the gold's rows an accident of the query plan."""
    question = QUESTIONS[index]
    results = []
    for reverse in (0, 1):
        conn = sqlite3.connect(f"file:{question.db_path}?mode=ro", uri=True)
        try:
            conn.execute(f"PRAGMA reverse_unordered_selects = {reverse}")
            results.append(conn.execute(question.query).fetchall())
        finally:
            conn.close()
    # Compared as the reward compares (a float sum in another order differs in its last bits: shop-7).
    assert results_match(results[1], results[0], ordered=gold_is_ordered(question.query)), results


@pytest.mark.parametrize("env_id", ["sql:Spider-v0", "sql:BIRD-v0"])
def test_sample_golds_score_one(env_id: str) -> None:
    env = gem_core.make(env_id)
    inner = env.unwrapped
    try:
        for index, question in enumerate(inner.questions):
            env.reset(options={"index": index})
            _, reward, *_ = env.step(f"<answer>{question.query}</answer>")
            assert reward == 1.0, question
            env.reset(options={"index": index})
            assert env.step("<answer>SELECT 1 WHERE 0</answer>")[1] == 0.0
    finally:
        env.close()


def test_bird_evidence_is_in_the_prompt_and_sets_compare() -> None:
    env = gem_core.make("sql:BIRD-v0")
    try:
        obs, _ = env.reset(options={"index": 0})
        assert "Hint: mythic refers to rarity = 'mythic'" in obs
        assert env.unwrapped.rule == "bird"
        env.reset(options={"index": 2})  # set comparison: duplicates do not matter
        assert env.step("<answer>SELECT name FROM cards WHERE artist = 'Lee' UNION ALL SELECT 'Elk'</answer>")[1] == 1
    finally:
        env.close()


def test_explore_with_both_call_syntaxes_then_answer() -> None:
    env = gem_core.make("sql:Shop-v0")
    try:
        obs, info = env.reset(options={"index": 0})
        assert "CREATE TABLE customers" in obs and "<sql>" in obs and info["tools"][0]["function"]["name"] == "sql"
        call = '<tool_call>{"name": "sql", "arguments": {"query": "SELECT count(*) FROM customers"}}</tool_call>'
        obs, reward, terminated, _, info = env.step(f"<sql>PRAGMA table_info(customers)</sql>\n{call}")
        assert not terminated and reward == 0.0 and info["tool_calls"] == 2
        assert "email" in obs and "\n40\n" in obs and info["observation_role"] == "tool"
        _, reward, terminated, _, info = env.step("<answer>SELECT count(*) FROM customers</answer>")
        assert (reward, terminated, info["success"]) == (1.0, True, True)
    finally:
        env.close()


def test_a_hostile_query_ends_only_its_call() -> None:
    env = gem_core.make("sql:Shop-v0", timeout_s=0.2)
    try:
        env.reset(options={"index": 0})
        hostile = [
            "DROP TABLE customers",
            "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c",
            "ATTACH '/tmp/x.db' AS x",
        ]
        obs, _, terminated, _, info = env.step("".join(f"<sql>{q}</sql>" for q in hostile))
        assert not terminated and [r["ok"] for r in info["tool_results"]] == [False, False, False]
        assert obs.count("[error]") == 3 and "longer than 0.2 s" in obs
        obs, *_ = env.step("<sql>SELECT count(*) FROM customers</sql>")
        assert "\n40\n" in obs
        assert env.step("<answer>SELECT count(*) FROM customers</answer>")[1] == 1.0
    finally:
        env.close()


def test_after_the_tool_budget_the_response_goes_to_the_task() -> None:
    env = gem_core.make("sql:Shop-v0", tool_wrapper={"max_tool_calls": 1})
    try:
        env.reset(options={"index": 0})
        obs, *_ = env.step("<sql>SELECT 1</sql>")
        assert "used all your tool calls" in obs
        _, reward, terminated, _, info = env.step("<sql>SELECT count(*) FROM customers</sql>")
        assert terminated and reward == 0.0 and info["format_error"]
    finally:
        env.close()


def test_a_failing_answer_says_why(bundled: SqlEnv) -> None:
    reward, info = answer(bundled, 0, "<answer>SELECT nope FROM customers</answer>")
    assert reward == 0.0 and "no such column: nope" in info["answer_error"]
    reward, info = answer(bundled, 0, "<answer>DROP TABLE customers</answer>")
    assert reward == 0.0 and "read-only" in info["answer_error"]


def test_answer_row_limit(bundled: SqlEnv) -> None:
    env = SqlEnv(answer_max_rows=3, databases=("shop",))
    try:
        reward, info = answer(env, 0, "<answer>SELECT * FROM orders</answer>")
        assert reward == 0.0 and info["answer_error"] == "more than 3 rows"
    finally:
        env.close()


def test_format_error_and_episode_end() -> None:
    env = SqlEnv(databases=("hr",), format_error_reward=-0.5)
    try:
        env.reset(options={"index": 0})
        _, reward, terminated, _, info = env.step("no query here")
        assert (reward, terminated, info["format_error"]) == (-0.5, True, True)
        assert env.run_query("SELECT 1").error is not None  # the episode is over
        with pytest.raises(ResetNeeded):
            env.step("<answer>SELECT 1</answer>")
        with pytest.raises(InvalidAction):
            env.reset()
            env.step(None)  # type: ignore[arg-type]
    finally:
        env.close()


@pytest.mark.parametrize("index", [-1, 12, True, "0"], ids=["negative", "past-end", "bool", "str"])
def test_reset_index_is_checked(index: object) -> None:
    env = SqlEnv(databases=("hr",))
    try:
        with pytest.raises(ValueError, match=r"options\['index'\] must be an int in \[0, 12\)"):
            env.reset(options={"index": index})
    finally:
        env.close()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"timeout_s": 0}, "timeout_s"),
        ({"source": "mysql"}, "source"),
        ({"bogus": 1}, "bogus"),
        ({"source": "spider"}, "needs path="),
        ({"databases": ("nope",)}, "no bundled database"),
    ],
    ids=["timeout", "source", "unknown-option", "spider-without-path", "unknown-database"],
)
def test_bad_options_name_the_field(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        gem_core.make("sql:Bundled-v0", **kwargs)


@pytest.mark.parametrize(
    ("text", "sql"),
    [
        ("<answer>SELECT 1</answer>", "SELECT 1"),
        ("<answer>\n```sql\nSELECT 2;\n```\n</answer>", "SELECT 2"),
        ("first <answer>SELECT 1</answer> then <answer>SELECT 3</answer>", "SELECT 3"),
        ("```sql\nSELECT 4\n```", "SELECT 4"),
        ("<ANSWER>SELECT 5", "SELECT 5"),
        ("<answer> ; </answer>", None),
        ("no query", None),
    ],
    ids=["tag", "fenced-in-tag", "last-tag", "fence", "unclosed-upper", "empty", "none"],
)
def test_extract_answer(text: str, sql: str | None) -> None:
    assert extract_answer(text) == sql


_PROSE = st.text(st.characters(blacklist_characters="<>`"), max_size=30)
_SQL = st.text(st.characters(blacklist_characters="<>`;"), min_size=1, max_size=30).filter(lambda t: t.strip())


@settings(max_examples=200, deadline=None)
@given(
    before=_PROSE,
    sql=_SQL,
    after=_PROSE,
    mention=st.sampled_from(["", "I put it in <answer> tags: ", "<answer></answer> ", "<answer> ; </answer>"]),
    ending=st.sampled_from(["</answer>", "", ";</answer>", "; ;\n</answer>"]),
    fence=st.booleans(),
    trailer=st.sampled_from(["", " <answer></answer>", " <answer>\n</answer>"]),
)
def test_the_last_non_empty_answer_is_the_query(
    before: str, sql: str, after: str, mention: str, ending: str, fence: bool, trailer: str
) -> None:
    """Prose around it, an earlier mention of the tag, an empty answer after it, a fence, semicolons."""
    body = f"```sql\n{sql}\n```" if fence else sql
    tail = f" {after}{trailer}" if ending.endswith("</answer>") else ""
    response = f"{before}{mention}<answer>{body}{ending}{tail}"
    assert extract_answer(response) == sql.strip()


class GoldBackend(Backend):
    """Message mode, no server: explores once with the sql tool, then answers with the gold query."""

    def __init__(self) -> None:
        super().__init__("gold", Sampling())
        self.by_question = {q.question: q.query for q in QUESTIONS}

    async def generate(self, request: TurnRequest, key: str) -> Generation:
        if request.turn == 0:
            return Generation(text="<sql>SELECT name FROM sqlite_master</sql>")
        prompt = str(request.messages[0]["content"]) if request.messages[0]["role"] == "user" else ""
        prompt = prompt or str(request.messages[1]["content"])
        question = re.search(r"Question: (.*)\n", prompt)
        assert question is not None
        return Generation(text=f"<answer>{self.by_question[question.group(1)]}</answer>")


def test_gem_eval_through_the_episode_engine() -> None:
    settings = EvalSettings(
        env_ids=["sql:Shop-v0", "sql:HR-v0"], num_episodes=6, limits=EpisodeLimits(max_turns=4), concurrency=4
    )
    records = asyncio.run(evaluate(GoldBackend(), settings))
    assert len(records) == 12 and all(r.get("error") is None for r in records)
    assert [(s.env_id, s.success, s.turns) for s in summarize(records)] == [
        ("sql:Shop-v0", 1.0, 2.0),
        ("sql:HR-v0", 1.0, 2.0),
    ]


@pytest.mark.parametrize("backend", ["sync", "async", "process"])
def test_vector_envs(backend: str) -> None:
    envs = gem_core.make_vec("sql:Bundled-v0", 4, backend=backend)  # type: ignore[arg-type]
    try:
        obs, _ = envs.reset(seed=7)
        assert len(obs) == 4 and all("Schema:" in o for o in obs)
        obs, rewards, terminated, *_ = envs.step(["<sql>SELECT 1</sql>"] * 4)
        assert list(terminated) == [False] * 4 and all("(1 row)" in o for o in obs)
        _, rewards, terminated, *_ = envs.step(["<answer>SELECT 1</answer>"] * 4)
        assert list(terminated) == [True] * 4 and list(rewards) == [0.0] * 4
    finally:
        envs.close()


def test_many_episodes_on_one_database_at_once() -> None:
    failures: list[str] = []

    def worker(offset: int) -> None:
        env = gem_core.make("sql:Flights-v0", tool_wrapper={"max_tool_calls": 50})
        try:
            for round_ in range(3):
                index = (offset + round_) % 12
                env.reset(options={"index": index})
                obs, *_ = env.step("<sql>SELECT count(*) FROM flights</sql><sql>DELETE FROM flights</sql>")
                gold = env.unwrapped.questions[index].query
                reward = env.step(f"<answer>{gold}</answer>")[1]
                if "\n80\n" not in obs or "read-only" not in obs or reward != 1.0:
                    failures.append(f"{offset}/{round_}: {obs!r} {reward}")
        finally:
            env.close()

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []


@settings(max_examples=60, deadline=None)
@given(responses=st.lists(model_text(["sql"], arguments=("query", "sql")), min_size=1, max_size=3))
def test_hostile_model_text_never_breaks_the_episode(responses: list[str]) -> None:
    path = bundled_database("shop")
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    env = gem_core.make("sql:Shop-v0", timeout_s=0.2, tool_wrapper={"max_tool_calls": 100})
    try:
        env.reset(options={"index": 0})
        for response in responses:
            obs, reward, terminated, truncated, info = env.step(response)
            assert isinstance(obs, str) and isinstance(reward, float) and not truncated
            if terminated:  # the hostile text was taken as the final answer: it scored, the episode ended
                assert reward in (0.0, 1.0) and "success" in info
                env.reset(options={"index": 0})
        obs, *_ = env.step("<sql>SELECT count(*) FROM customers</sql>")
        assert "\n40\n" in obs
    finally:
        env.close()
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before


def _spider_with_pets_db(tmp_path: Path, content: bytes | None) -> Path:
    root = tmp_path / "spider"
    shutil.copytree(SAMPLES / "spider", root)
    pets = root / "database" / "pets" / "pets.sqlite"
    if content is not None:
        pets.write_bytes(content)
    return root


_PETS = (SAMPLES / "spider" / "database" / "pets" / "pets.sqlite").read_bytes()
BROKEN_DATABASES = {
    "garbage": b"this is not a database" * 50,
    "empty-file": b"",
    "lfs-pointer": b"version https://git-lfs.github.com/spec/v1\noid sha256:abc\nsize 123\n",
    "no-tables": None,  # a valid SQLite file with nothing in it, made below
    "header-only": _PETS[:100],
}


@pytest.mark.parametrize("kind", list(BROKEN_DATABASES), ids=list(BROKEN_DATABASES))
def test_a_database_file_that_cannot_serve_is_a_config_error_at_reset(tmp_path: Path, kind: str) -> None:
    root = _spider_with_pets_db(tmp_path, BROKEN_DATABASES[kind])
    if kind == "no-tables":
        pets = root / "database" / "pets" / "pets.sqlite"
        pets.unlink()
        sqlite3.connect(pets).execute("PRAGMA user_version = 1").connection.close()
    env = gem_core.make("sql:Spider-v0", path=str(root))
    try:
        pets_index = next(i for i, q in enumerate(env.unwrapped.questions) if q.db_id == "pets")
        with pytest.raises(ConfigError, match=r"question spider-dev-\d+: .*pets\.sqlite"):
            env.reset(options={"index": pets_index})
        with pytest.raises(ResetNeeded):
            env.step("<answer>SELECT 1</answer>")  # the failed reset left no episode running
        concerts = next(i for i, q in enumerate(env.unwrapped.questions) if q.db_id == "concerts")
        env.reset(options={"index": concerts})  # the other databases still serve
    finally:
        env.close()


@settings(max_examples=30, deadline=None)
@given(cut=st.integers(0, len(_PETS)), noise=st.binary(max_size=64), at=st.integers(0, len(_PETS)))
def test_any_damaged_database_file_gives_a_result_or_a_config_error(cut: int, noise: bytes, at: int) -> None:
    """A cut or scribbled-on database file: reset raises ConfigError, or every step returns normally."""
    damaged = bytearray(_PETS[:cut])
    damaged[at : at + len(noise)] = noise
    with tempfile.TemporaryDirectory() as folder:
        root = _spider_with_pets_db(Path(folder), bytes(damaged))
        questions = load_spider(root, db_ids=["pets"])
        env = SqlEnv(source="spider", path=str(root), databases=("pets",))
        try:
            for index, question in enumerate(questions):
                try:
                    env.reset(options={"index": index})
                except ConfigError:
                    continue
                _, reward, terminated, _, info = env.step(f"<answer>{question.query}</answer>")
                assert terminated and reward in (0.0, 1.0)
                assert reward == 1.0 or "gold_error" in info or "answer_error" in info
        finally:
            env.close()


def test_bad_index_is_a_config_error_and_reset_info_names_the_index() -> None:
    env = SqlEnv(databases=("hr",))
    try:
        assert len(env) == 12
        assert env.reset(options={"index": 3})[1]["index"] == 3
        with pytest.raises(ConfigError, match="must be an int"):
            env.reset(options={"index": 12})
        with pytest.raises(ResetNeeded):
            env.step("<answer>SELECT 1</answer>")
    finally:
        env.close()


def test_gold_results_are_cached_per_row_limit() -> None:
    """An env with a small answer_max_rows must not hand its cut gold result to one with a large limit."""

    def rows(sql: str, db: Path) -> int:
        conn = sqlite3.connect(db)
        try:
            return len(conn.execute(sql).fetchall())
        finally:
            conn.close()

    index = next(i for i, q in enumerate(QUESTIONS) if rows(q.query, q.db_path) > 1)
    small, large = SqlEnv(answer_max_rows=1), SqlEnv()
    try:
        small.reset(options={"index": index})
        small.step(f"<answer>{QUESTIONS[index].query}</answer>")
        large.reset(options={"index": index})
        _, reward, _, _, info = large.step(f"<answer>{QUESTIONS[index].query}</answer>")
        assert reward == 1.0, info
    finally:
        small.close(), large.close()


@pytest.mark.parametrize("tag", ["answer", "ANSWER", "Answer"])
def test_an_answer_in_any_case_is_final_even_beside_tool_calls(tag: str) -> None:
    env = gem_core.make("sql:HR-v0")
    try:
        env.reset(options={"index": 0})
        _, _, terminated, _, info = env.step(f"<sql>SELECT 1</sql> <{tag}>SELECT 1</{tag}>")
        assert terminated and info["tool_calls"] == 0 and info["parsed_action"] == "SELECT 1"
    finally:
        env.close()


@settings(max_examples=20, deadline=None)
@given(start=st.integers(0, 2**40), databases=st.sampled_from([None, ("hr",), ("shop", "school")]))
def test_consecutive_seeds_visit_every_question_once_and_repeat_exactly(start: int, databases: Any) -> None:
    env = SqlEnv(databases=databases) if databases else SqlEnv()
    try:
        n = len(env)
        seen = [env.reset(seed=start + i)[1]["question_id"] for i in range(n)]
        assert sorted(seen) == sorted(q.id for q in env.questions)
        assert env.reset(seed=start)[0] == env.reset(seed=start)[0]
        assert env.reset(seed=start)[1]["question_id"] == seen[0]
    finally:
        env.close()


@pytest.mark.parametrize("rule", ["bird", "spider"])
def test_a_band_of_floats_from_a_recursive_cte_does_not_forge_a_float_answer(tmp_path: Path, rule: str) -> None:
    """An adversary's answer: 3,000 distinct floats 9e-10 apart around the gold's value (each close to the next)."""
    root = tmp_path / "bird"
    shutil.copytree(SAMPLES / "bird" / "dev_databases", root / "dev_databases")
    question = {"db_id": "cards", "question": "What is five?", "evidence": "", "SQL": "SELECT 5.0"}
    (root / "dev.json").write_text(json.dumps([question]))
    env = gem_core.make("sql:BIRD-v0", path=str(root), match=rule)
    band = "WITH RECURSIVE b(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM b WHERE i < 2999) "
    try:
        env.reset(options={"index": 0})
        forged = env.step(f"<answer>{band}SELECT 5.0 + (i - 1500) * 9e-10 FROM b</answer>")
        assert forged[1] == 0.0 and not forged[4]["success"]
        env.reset(options={"index": 0})  # the gold's value computed another way (4.999999999999998) still scores
        tenths = "WITH RECURSIVE s(i, t) AS (SELECT 0, 0.0 UNION ALL SELECT i + 1, t + 0.1 FROM s WHERE i < 50) "
        assert env.step(f"<answer>{tenths}SELECT t FROM s WHERE i = 50</answer>")[1] == 1.0
    finally:
        env.close()

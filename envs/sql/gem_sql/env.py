r"""The database env: a question about a SQLite database, explored with a query tool, answered with one query.

:class:`SqlEnv` holds the task: ``reset`` picks a question and shows the database's schema;
``step`` takes the final answer, a query in ``<answer>...</answer>`` (or the last ```` ```sql ````
block), runs it and the gold query under the same limits and scores 1 when their results match
(:func:`gem_sql.compare.results_match`). The registered ids wrap it in gem_core's
:class:`~gem_core.tools.wrapper.ToolEnvWrapper` with :class:`SqlQueryTool`, so the model explores with
``<sql>SELECT ...</sql>`` or a JSON ``<tool_call>``; every query goes through the episode's read-only
:class:`~gem_sql.database.Database`.
"""

from __future__ import annotations

import asyncio
import functools
import random
import re
import sqlite3
import threading
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gem_core.core import Env, ResetReturn, StepReturn, require_text_action
from gem_core.errors import ConfigError, ResetNeeded
from gem_core.registry import format_config_error
from gem_core.tools.base import Tool, ToolResult
from gem_sql.compare import MatchRule, gold_is_ordered, results_match
from gem_sql.data import Question, bundled_questions, load_bird, load_spider
from gem_sql.database import Database, QueryLimits, QueryResult, format_result

__all__ = ["SQL_TOOL_DEFAULTS", "SqlEnv", "SqlEnvConfig", "SqlQueryTool", "extract_answer", "make_sql_env"]

PROMPT = (
    "Answer a question about the SQLite database `{db_id}` by writing one SQL query.\n\n"
    "Schema:\n{schema}\n\nQuestion: {question}\n{evidence}"
    "You may run read-only queries to look at the data first. When you are done, reply with your final "
    "query inside <answer>...</answer>; its result is compared with the correct query's result."
)
#: The tool wrapper's settings for the registered ids: a response with ``<answer>`` is final.
SQL_TOOL_DEFAULTS: dict[str, Any] = {
    "max_tool_calls": 10,
    "max_calls_per_turn": 3,
    "answer_pattern": r"(?i)<answer>",  # as extract_answer reads it: any case
    "answer_with_calls": "env",
}
# The text after an <answer> up to its </answer> (or the end), never across another <answer>: a
# response that mentions "<answer>" in prose before its real answer still yields the real one.
_ANSWER_RE = re.compile(r"<answer>((?:(?!<answer>).)*?)(?:</answer>|$)", re.DOTALL | re.IGNORECASE)
_FENCE_RE = re.compile(r"```[ \t]*(?:sql|sqlite)?[ \t]*\n?(.*?)```", re.DOTALL | re.IGNORECASE)
_TRAILING = re.compile(r"[\s;]+$")


def _clean(text: str) -> str:
    fenced = _FENCE_RE.findall(text)
    return _TRAILING.sub("", fenced[-1] if fenced else text).strip()


def extract_answer(response: str) -> str | None:
    """The final query of a response, or ``None`` when there is none (or it is empty).

    The last non-empty ``<answer>`` (a fenced block inside it is unwrapped), else the last
    ```` ```sql ```` block; trailing semicolons and whitespace are dropped.
    """
    for text in reversed(_ANSWER_RE.findall(response)):
        if cleaned := _clean(text):
            return cleaned
    blocks = [cleaned for block in _FENCE_RE.findall(response) if (cleaned := _TRAILING.sub("", block).strip())]
    return blocks[-1] if blocks else None


class SqlEnvConfig(BaseModel):
    """Configuration of :class:`SqlEnv` (validated; errors name the field).

    Attributes:
        source: ``"bundled"`` (the shipped databases), ``"spider"`` or ``"bird"`` (data on disk at ``path``).
        path: The Spider or BIRD directory (for ``source="spider"``/``"bird"``).
        split: The questions file inside ``path``.
        db_dir: The databases' folder inside ``path`` (default: ``database`` for Spider, ``dev_databases`` for BIRD).
        databases: Keep only questions on these database ids.
        match: ``"spider"`` (columns in any order, duplicates count, order when the gold has ORDER BY)
            or ``"bird"`` (sets of rows); default ``"bird"`` for BIRD data, ``"spider"`` otherwise.
        timeout_s: Time limit of each exploration query.
        max_rows: Rows an exploration query shows.
        max_cell_chars: Longest cell shown.
        max_output_chars: Longest query output shown.
        answer_timeout_s: Time limit of the final query and of the gold query.
        answer_max_rows: Rows the final and gold queries may return; more is a failed answer.
        max_scratch_bytes: Bytes of SQLite temporary files the process may hold during a query
            (:attr:`gem_sql.database.QueryLimits.max_scratch_bytes`).
        format_error_reward: Reward of a response with no query in it.
        label: The env id, shown in error messages (set by the registered specs).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    source: Literal["bundled", "spider", "bird"] = "bundled"
    path: str | None = None
    split: str = "dev.json"
    db_dir: str | None = None
    databases: tuple[str, ...] | None = None
    match: MatchRule | None = None
    timeout_s: float = Field(2.0, gt=0)
    max_rows: int = Field(20, ge=1)
    max_cell_chars: int = Field(60, ge=8)
    max_output_chars: int = Field(4000, ge=100)
    answer_timeout_s: float = Field(10.0, gt=0)
    answer_max_rows: int = Field(100_000, ge=1)
    max_scratch_bytes: int = Field(2_000_000_000, ge=1)
    format_error_reward: float = 0.0
    label: str | None = None


@functools.lru_cache(maxsize=32)
def _questions(
    source: str, path: str | None, split: str, db_dir: str | None, databases: tuple[str, ...] | None
) -> tuple[Question, ...]:
    if source == "bundled":
        return tuple(bundled_questions(databases))
    if path is None:
        raise ConfigError(f"source={source!r} needs path= (the directory of your {source} data)")
    if source == "spider":
        return tuple(load_spider(path, split=split, db_dir=db_dir or "database", db_ids=databases))
    return tuple(load_bird(path, split=split, db_dir=db_dir or "dev_databases", db_ids=databases))


_GOLD: dict[tuple[Path, str, QueryLimits], QueryResult] = {}
_GOLD_LOCK = threading.Lock()
_SCHEMAS: dict[Path, str] = {}


def _open(question: Question, limits: QueryLimits) -> Database:
    """The question's database, or a :class:`ConfigError` naming the file when it cannot serve one."""
    try:
        return Database(question.db_path, limits=limits)
    except (OSError, sqlite3.Error) as exc:
        raise ConfigError(
            f"question {question.id}: cannot open database {question.db_path} ({type(exc).__name__}: {exc}); "
            "it must be a SQLite file of the data set: check the download, or leave this db_id out with databases="
        ) from exc


def _schema(question: Question, database: Database) -> str:
    """The database's ``CREATE TABLE`` statements (cached per file); a file with no table is refused."""
    if database.path not in _SCHEMAS:
        try:
            schema = database.schema()
        except sqlite3.Error as exc:
            schema, why = "", str(exc)
        else:
            why = "it has no tables (an empty file, or not this data set's database?)"
        if not schema:
            raise ConfigError(f"question {question.id}: database {question.db_path} cannot serve questions: {why}")
        _SCHEMAS[database.path] = schema
    return _SCHEMAS[database.path]


class SqlEnv(Env):
    """Answer a question about a database with one SQL query; reward 1 when its result matches the gold's.

    ``reset(options={"index": i})`` picks question ``i``; ``reset(seed=s)`` picks question
    ``s mod n`` of a fixed shuffle (so ``n`` consecutive seeds visit each of the ``n`` questions once);
    a ``reset()`` without either draws one from :attr:`py_random`.
    The final ``step`` sets ``info``: ``success``, ``format_error``, ``parsed_action`` (the query),
    ``question_id``, ``db_id``, ``answer_error`` (why the query failed) or ``gold_error`` (the data
    set's gold query failed: scored 0, the question is broken), ``answer_rows``.
    """

    metadata: ClassVar[dict[str, Any]] = {"multi_turn": True}

    def __init__(self, **kwargs: Any) -> None:
        try:
            self.config = SqlEnvConfig.model_validate(kwargs)
        except ValidationError as exc:
            raise ConfigError(format_config_error(f"{kwargs.get('label') or 'sql env'} options", exc)) from exc
        cfg = self.config
        self.questions = _questions(cfg.source, cfg.path, cfg.split, cfg.db_dir, cfg.databases)
        self.rule: MatchRule = cfg.match or ("bird" if cfg.source == "bird" else "spider")
        scratch = cfg.max_scratch_bytes
        self.limits = QueryLimits(timeout_s=cfg.timeout_s, max_rows=cfg.max_rows, max_scratch_bytes=scratch)
        self.answer_limits = QueryLimits(
            timeout_s=cfg.answer_timeout_s, max_rows=cfg.answer_max_rows, max_scratch_bytes=scratch
        )
        self.question: Question | None = None
        self.database: Database | None = None
        self._done = True
        # Seeds s, s+1, ..., s+n-1 visit every question once (a vector env's sub-envs seeded seed+i get
        # distinct questions), in a fixed mixed order so that neighbouring seeds span the databases.
        self._seed_order = list(range(len(self.questions)))
        random.Random(len(self.questions)).shuffle(self._seed_order)

    # ------------------------------------------------------------------ episode
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> ResetReturn:
        super().reset(seed=seed)
        self._done = True  # until the new prompt is built: a failed reset leaves no episode running
        index = (options or {}).get("index")
        if index is None and seed is not None:
            index = self._seed_order[seed % len(self.questions)]
        elif index is None:
            index = self.py_random.randrange(len(self.questions))
        elif isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < len(self.questions):
            raise ConfigError(f"options['index'] must be an int in [0, {len(self.questions)}), got {index!r}")
        question = self.questions[index]
        if self.database is None or self.database.path != question.db_path.resolve():
            if self.database is not None:
                self.database.close()
                self.database = None
            self.database = _open(question, self.limits)
        evidence = f"Hint: {question.evidence}\n" if question.evidence else ""
        obs = PROMPT.format(
            db_id=question.db_id, schema=_schema(question, self.database), question=question.question, evidence=evidence
        )
        self.question = question
        self._done = False
        return obs, {"question_id": question.id, "db_id": question.db_id, "index": index}

    def __len__(self) -> int:
        return len(self.questions)

    def run_query(self, sql: str) -> QueryResult:
        """Run an exploration query on this episode's database (what :class:`SqlQueryTool` calls)."""
        if self.database is None or self._done:
            return QueryResult(error="no episode is running; the database is closed")
        return self.database.run(sql, self.limits)

    def show(self, result: QueryResult) -> str:
        """``result`` as the text the model sees."""
        return format_result(result, max_cell_chars=self.config.max_cell_chars, max_chars=self.config.max_output_chars)

    def step(self, action: str) -> StepReturn:
        require_text_action(self, action, "the reply, with the final query in <answer>...</answer>")
        if self.question is None or self.database is None or self._done:
            raise ResetNeeded("call reset() before step(); the episode is over")
        question, database = self.question, self.database
        self._done = True
        info: dict[str, Any] = {"question_id": question.id, "db_id": question.db_id, "success": False}
        sql = extract_answer(action)
        info["format_error"] = sql is None
        if sql is None:
            obs = "No query found. Put the final query inside <answer>...</answer>."
            return obs, self.config.format_error_reward, True, False, info
        info["parsed_action"] = sql
        gold = self._gold(question, database)
        if gold.error is not None or gold.truncated:
            info["gold_error"] = gold.error or f"the gold query returned more than {self.config.answer_max_rows} rows"
            return "The reference query of this question failed; it scores 0.", 0.0, True, False, info
        answer = database.run(sql, self.answer_limits)
        if answer.error is not None or answer.truncated:
            info["answer_error"] = answer.error or f"more than {self.config.answer_max_rows} rows"
            return f"Your query failed: {info['answer_error']}", 0.0, True, False, info
        info["answer_rows"] = len(answer.rows)
        ordered = self.rule == "spider" and gold_is_ordered(question.query)
        success = results_match(answer.rows, gold.rows, ordered=ordered, rule=self.rule)
        info["success"] = success
        verdict = "correct" if success else "not correct"
        return f"Your query's result is {verdict}.", (1.0 if success else 0.0), True, False, info

    def _gold(self, question: Question, database: Database) -> QueryResult:
        key = (database.path, question.query, self.answer_limits)
        with _GOLD_LOCK:
            cached = _GOLD.get(key)
        if cached is None:
            cached = database.run(question.query, self.answer_limits)
            if "longer than" not in (cached.error or ""):  # a timeout may pass on a quieter machine
                with _GOLD_LOCK:
                    _GOLD[key] = cached
        return cached

    def sample_random_action(self) -> str:
        choices = [
            "<answer>SELECT 1</answer>",
            "<answer>SELECT name FROM sqlite_master</answer>",
            "I am not sure.",
            "```sql\nSELECT count(*) FROM sqlite_master\n```",
        ]
        return self.py_random.choice(choices)

    def close(self) -> None:
        self._done = True
        if self.database is not None:
            self.database.close()
            self.database = None


class SqlQueryTool(Tool):
    """Runs a read-only query on the current episode's database of a :class:`SqlEnv`.

    Args:
        env: The env whose episode database the queries go to.
    """

    name = "sql"
    description = (
        "Run one read-only SQLite query (SELECT, WITH, PRAGMA table_info(...)) on the task's database; "
        "returns the first rows as a table, or the error."
    )
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {"query": {"type": "string", "description": "One SQLite SELECT statement."}},
        "required": ["query"],
    }
    tag_argument = "query"

    def __init__(self, env: SqlEnv) -> None:
        self.env = env

    async def execute(self, arguments: dict[str, Any]) -> ToolResult:
        query = arguments.get("query")
        if not isinstance(query, str):
            return ToolResult(error='the sql tool takes {"query": "<one SELECT statement>"}')
        result = await asyncio.to_thread(self.env.run_query, query)
        metadata = {"rows": len(result.rows), "truncated": result.truncated}
        if result.error is not None:
            return ToolResult(error=result.error, elapsed_s=result.elapsed_s, metadata=metadata)
        return ToolResult(output=self.env.show(result), elapsed_s=result.elapsed_s, metadata=metadata)


def make_sql_env(*, tool_wrapper: dict[str, Any] | None = None, **kwargs: Any) -> Env:
    """A :class:`SqlEnv` with the ``sql`` query tool (what the registered ids build).

    Args:
        tool_wrapper: Overrides of :data:`SQL_TOOL_DEFAULTS` (any
            :class:`~gem_core.tools.wrapper.ToolWrapperConfig` field but ``tools``).
        **kwargs: :class:`SqlEnvConfig` fields.
    """
    from gem_core.tools.wrapper import ToolEnvWrapper

    env = SqlEnv(**kwargs)
    try:
        return ToolEnvWrapper(env, [SqlQueryTool(env)], **{**SQL_TOOL_DEFAULTS, **(tool_wrapper or {})})
    except BaseException:
        env.close()
        raise

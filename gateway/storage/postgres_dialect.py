"""What only PostgreSQL takes, by the names gateway.storage.sqlite_dialect gives SQLite's (see there what each
does): lists as array arguments, JSON kept in TEXT columns read through jsonb, dates by to_char, and the
full-text search over `messages.search_vector` (migrations/postgres/001_schema.sql).

The search:
On SQLite, search quotes each word of the query as an FTS5 phrase (`"deploy" "friday"`): every word must be
in the message, each as a whole word (no prefix matching), case and diacritics aside; a word with
punctuation inside ("example.com") is its parts, one after the other. The same here, over
`messages.search_vector` (migrations/postgres/001_schema.sql): one `phraseto_tsquery` per word, joined with
`&&`, each word's punctuation made a separator the way the column's text was. (`plainto_tsquery` of the
whole query would lose the order of a word's parts; `websearch_to_tsquery` would read `-word` and `or` as
operators, which SQLite does not.)

What differs: the rank is `ts_rank` (SQLite: bm25), so hits of near rank may come in another order; the
snippet is `ts_headline`'s choice of 11 or 12 words around a match (in [brackets], '…' where the message
was cut, as SQLite's `snippet` marks them), which may be other words than SQLite's; a word with
punctuation inside is found but not marked; and a message is searched in its first 100,000 characters.
"""

from __future__ import annotations

from typing import Any, Sequence

# -- lists handed over as one argument ------------------------------------------------------------------------

IN_LIST = "= ANY(?)"


def listed(values: Sequence[Any]) -> Any:
    return list(values)


# -- JSON kept in TEXT columns ---------------------------------------------------------------------------------


def json_object(*pairs: tuple[str, str]) -> str:
    return "jsonb_build_object(" + ", ".join(f"'{key}', {value}" for key, value in pairs) + ")::text"


def json_boolean(condition: str) -> str:
    return f"({condition})"


def json_field(document: str, key: str) -> str:
    return f"(({document})::jsonb ->> '{key}')"


def json_number(document: str, key: str) -> str:
    return f"(({document})::jsonb ->> '{key}')::bigint"


def json_items(document: str, alias: str) -> str:
    return f"jsonb_array_elements_text(({document})::jsonb) AS {alias}(value)"


def json_appended(document: str) -> str:
    return f"(coalesce({document}, '[]')::jsonb || to_jsonb(CAST(? AS TEXT)))::text"


# -- dates -----------------------------------------------------------------------------------------------------


def utc_day(seconds: str) -> str:
    return f"to_char(to_timestamp({seconds}) AT TIME ZONE 'UTC', 'YYYY-MM-DD')"


# -- rows in the order they were written -----------------------------------------------------------------------

INSERTION_ORDER = "code"  # (pairing codes made in the same instant: any order among them)

# -- full-text search over transcripts -------------------------------------------------------------------------

_WORD = "phraseto_tsquery('chatgate_search', regexp_replace(?{}, '[[:punct:]]+', ' ', 'g'))"
# The match marked with two private-use characters no message holds, so that the snippet's own text can be
# compared with the message's ends ('…' where it was cut, as SQLite's `snippet` does), then marked [so].
_MARKS = "'StartSel=' || U&'\\E000' || ', StopSel=' || U&'\\E001' || ', MaxWords=12, MinWords=11, ShortWord=0'"
_BLANK = "E' \\t\\r\\n'"
_SQL = f"""
SELECT session_id, role, created_at,
       CASE WHEN starts_with(btrim(content, {_BLANK}), plain) THEN '' ELSE '…' END
       || replace(replace(btrim(marked, {_BLANK}), U&'\\E000', '['), U&'\\E001', ']')
       || CASE WHEN right(btrim(content, {_BLANK}), length(plain)) = plain THEN '' ELSE '…' END AS snip
FROM (SELECT m.id, m.session_id, m.role, m.content, m.created_at, q.words, ts_rank(m.search_vector, q.words) AS rank
      FROM messages m, (SELECT {{matched}} AS words) q
      WHERE m.search_vector @@ q.words AND m.role IN ('user', 'assistant') AND m.session_id {{among}}
      ORDER BY rank DESC, m.id LIMIT {{limit}}) hits,
     LATERAL (SELECT ts_headline('chatgate_search', content, words, {_MARKS}) AS marked) headline,
     LATERAL (SELECT btrim(replace(replace(marked, U&'\\E000', ''), U&'\\E001', ''), {_BLANK}) AS plain) unmarked
ORDER BY rank DESC, id"""



def search(query: str, *, platform: str, user_id: str, limit: int,
           session_id: int | None) -> tuple[Any, ...] | None:
    words = query.split()
    if not words:
        return None
    n = len(words)
    if session_id is not None:
        among, who = f"= ?{n + 1}", (session_id,)
    else:
        among, who = (f"IN (SELECT DISTINCT session_id FROM messages WHERE platform = ?{n + 1} AND user_id = ?{n + 2})",
                      (platform, user_id))
    matched = " && ".join(_WORD.format(i) for i in range(1, n + 1))
    return _SQL.format(matched=matched, among=among, limit=f"?{n + len(who) + 1}"), *words, *who, limit


# -- the database's clock ---------------------------------------------------------------------------------

NOW_SECONDS = "extract(epoch from clock_timestamp())::double precision"
INSTANCE = "current_setting('chatgate.instance', true)"  # the connection's instance (`PostgresEngine`), or NULL
ADVISORY_LOCK = "SELECT pg_advisory_xact_lock(?)"  # until the transaction ends: the callers' claims one at a time

# -- a read-modify-write's rows ------------------------------------------------------------

FOR_UPDATE = " FOR UPDATE"

# -- another process's commits ---------------------------------------------------------------------------------

DATA_VERSION = ("SELECT (SELECT count(*) FROM cron_jobs) * 4294967296"
                " + coalesce((SELECT max(xmin::text::bigint) FROM cron_jobs), 0)")
"""Changes when the scheduled jobs change (a job added, removed or edited by any process: the cron timers
reload then); this process's own changes count too, which only reloads once more."""

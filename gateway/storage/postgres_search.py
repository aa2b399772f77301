"""Full-text search over transcripts on PostgreSQL: the statement `SessionStore.search` runs there.

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

from typing import Any

_WORD = "phraseto_tsquery('chatgate_search', regexp_replace(${}, '[[:punct:]]+', ' ', 'g'))"
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


def search_statement(query: str, *, platform: str, user_id: str, limit: int = 10,
                     session_id: int | None = None) -> tuple[str, tuple[Any, ...]] | None:
    """The statement (asyncpg's $n placeholders) and its arguments for `SessionStore.search`'s arguments,
    whose rows are (session_id, role, created_at, snip), best first; None: the query has no words (no hits)."""
    words = query.split()
    if not words:
        return None
    n = len(words)
    if session_id is not None:
        among, who = f"= ${n + 1}", (session_id,)
    else:
        among, who = f"IN (SELECT DISTINCT session_id FROM messages WHERE platform = ${n + 1} AND user_id = ${n + 2})", \
            (platform, user_id)
    matched = " && ".join(_WORD.format(i) for i in range(1, n + 1))
    return _SQL.format(matched=matched, among=among, limit=f"${n + len(who) + 1}"), (*words, *who, limit)

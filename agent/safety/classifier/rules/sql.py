"""SQL text as the guard sees it: statements that destroy data (DROP, TRUNCATE, DELETE or UPDATE
without WHERE, ...), that run programs on the server or write its files (COPY ... TO PROGRAM,
INTO OUTFILE), and client commands that run a shell (`\\!` in psql and mysql, `.shell` in sqlite3).
Statements that change who may do what are dangerous too, as granting access is in the cloud rules:
GRANT and REVOKE, creating or altering a user or role (`ALTER USER app WITH SUPERUSER`, a new
password), and server-wide settings (`ALTER SYSTEM`, `SET GLOBAL`).
"""

from __future__ import annotations

import re
from typing import Iterator

from agent.safety.classifier.lazy import lazy_re
from agent.safety.classifier.vocabulary import DANGEROUS, Finding, Hit, Recurse


def _strip_sql(sql: str) -> str:
    out, i, n = [], 0, len(sql)
    while i < n:
        ch = sql[i]
        if ch == "'":
            j = i + 1
            while j < n and (sql[j] != "'" or sql[j + 1:j + 2] == "'"):
                j += 2 if sql[j] == "'" else 1
            out.append("''")
            i = j + 1
        elif sql.startswith("--", i) or (ch == "#" and (i == 0 or sql[i - 1] in " \t\n")):
            j = sql.find("\n", i)
            i = n if j < 0 else j
        elif sql.startswith("/*", i):
            j = sql.find("*/", i + 2)
            i = n if j < 0 else j + 2
        elif ch == "$" and (m := re.match(r"\$\w*\$", sql[i:i + 40])):
            j = sql.find(m.group(), i + m.end())
            out.append("''")
            i = n if j < 0 else j + m.end()
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def _no_where(up: str) -> bool:
    m = re.search(r"\bWHERE\s+(.*)", up)
    return not m or bool(re.match(r"(?:1\s*=\s*1|TRUE|1|'' = '')\s*(?:$|\bLIMIT\b|\bRETURNING\b|\bORDER\b)",
                                  m.group(1)))


_META_SHELL = lazy_re(r"^\s*(?:\\!|system\s|\.shell\b|\.system\b)\s*(.*)$", re.M | re.I)
_PROGRAM = lazy_re(r"\b(?:TO|FROM)\s+PROGRAM\s+(?:E?'((?:[^']|'')*)'|\$\w*\$(.*?)\$\w*\$)", re.I | re.S)
_OUTFILE = lazy_re(r"\bINTO\s+(?:OUT|DUMP)FILE\b|\blo_export\s*\(|\bpg_file_write\s*\(|\bCOPY\b[^;]*\bTO\s+'/",
                   re.I)
_DROPS = r"TABLE|DATABASE|SCHEMA|KEYSPACE|COLLECTION|USER|ROLE|OWNED|TABLESPACE|MATERIALIZED\s+VIEW|MEASUREMENT"


def scan_sql(sql: str) -> Iterator[Finding]:
    """Findings in SQL text (or a client's script: meta commands such as psql's `\\!` are seen too)."""
    for m in _META_SHELL.finditer(sql):
        yield Hit(DANGEROUS, "SQL client runs a shell command", m.group().strip())
        if m.group(1).strip():
            yield Recurse("shell", m.group(1), "SQL client shell")
    for m in _PROGRAM.finditer(sql):
        yield Hit(DANGEROUS, "SQL runs a program on the server (COPY ... PROGRAM)", " ".join(m.group().split()))
        yield Recurse("shell", (m.group(1) or "").replace("''", "'") or m.group(2) or "", "COPY ... PROGRAM")
    if m := _OUTFILE.search(sql):
        yield Hit(DANGEROUS, "SQL writes a file on the server", " ".join(m.group().split()))
    for stmt in _strip_sql(sql).split(";"):
        flat = " ".join(stmt.split())
        up = flat.upper()
        if not up:
            continue
        rule = None
        if m := re.search(rf"\bDROP\s+({_DROPS})\b", up):
            rule = f"SQL DROP {' '.join(m.group(1).split())}"
        elif re.search(r"(?:^|\s)TRUNCATE\b", up):
            rule = "SQL TRUNCATE"
        elif re.search(r"\bDELETE\s+FROM\b", up) and _no_where(up):
            rule = "SQL DELETE without WHERE"
        elif re.search(r"(?:^|\s)UPDATE\s+\S+(?:\s+(?:AS\s+)?\w+)?\s+SET\b", up) and _no_where(up):
            rule = "SQL UPDATE without WHERE"
        elif re.search(r"\bALTER\s+TABLE\b.*\bDROP\s+COLUMN\b", up):
            rule = "SQL DROP COLUMN"
        elif m := re.match(r"\s*(GRANT|REVOKE|(?:CREATE|ALTER|RENAME)\s+(?:USER|ROLE|LOGIN)|SET\s+PASSWORD|ALTER\s+SYSTEM"
                           r"|SET\s+(?:GLOBAL|PERSIST)\b|ALTER\s+(?:DATABASE|SCHEMA|TABLE)\s+\S+\s+OWNER)", up):
            rule = f"SQL {' '.join(m.group(1).split())}: changes who may do what, or the server's settings"
        if rule:
            yield Hit(DANGEROUS, rule, flat)

"""The command classifier: is a shell command line hardline, dangerous or safe?

    >>> from agent.safety.classifier import classify
    >>> classify("rm -rf build/")
    Verdict(verdict='dangerous', reasons=('recursive delete: rm -rf build/',))

Read it in this order: `verdict` (`classify`, and the analysis that walks a command line), `lexer`
(reading text as the shell would), `registry` (which rules judge a command), `rules/` (one module per
category of harm), and the words they share: `vocabulary` (Call, Hit, Recurse, levels, option parsing),
`paths` (what a path is), `flow` and `decode` (what commands in a pipeline print), `wrappers` (the
commands that run the rest of their line, which `verdict` peels off before judging what they run).

A rule is added only with the corpus line that needs it (tests/data/*corpus*.txt; bench/corpus_score.py
scores them). Where a rule would only restate what the sandbox already contains (writes outside the
workspace, the network, other users' files), the sandbox is the answer and the rule is not written:
the classifier is for what the sandbox lets through and for the hosts that have none.
Imports point one way: rules → vocabulary, paths, flow (two build on another: escapes on execution's
`runs`, remote on data's `DATA_CLIS`); registry → rules; verdict → registry, lexer.
"""

from agent.safety.classifier.verdict import Verdict, classify

__all__ = ["Verdict", "classify"]

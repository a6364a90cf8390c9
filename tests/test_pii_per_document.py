"""PII anonymisation is a function of the document: replaying the stage on one re-read record (``cuvee trace
--verify``) must give the text the run wrote, whatever the task processed before it."""

from __future__ import annotations


def test_pii_replacement_is_a_function_of_the_document():
    """A replayed stage must give the run's text from one document: PII's replacement cycle restarts with every
    document instead of running on across a task (where a document's e-mail placeholder depended on how many
    e-mails the task's earlier documents held)."""
    from datatrove.data import Document

    from cuvee.filters.pii import EMAIL_REPLACEMENTS, PIIAnonymizer

    first, second = "write to a@b.org", "or to c@d.org, e@f.org"
    alone = next(PIIAnonymizer().run([Document(text=second, id="2")])).text
    after = list(PIIAnonymizer().run([Document(text=first, id="1"), Document(text=second, id="2")]))[1].text
    assert after == alone == f"or to {EMAIL_REPLACEMENTS[0]}, {EMAIL_REPLACEMENTS[1]}"

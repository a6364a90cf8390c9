"""PII anonymisation of e-mail and IP addresses, as FineWeb does.

FineWeb (via datatrove's PIIFormatter) replaces e-mail addresses with ``email@example.com`` /
``firstname.lastname@example.org`` and *public* IPv4 addresses with addresses from a fixed list of
random, unresponsive IPs, cycling through the replacements; private, loopback and reserved addresses
(192.168.x.x, 127.0.0.1, version strings that merely look like IPs but are not global) stay, because
they identify no one. Same patterns and replacement lists, our own implementation with counters.

The cycle restarts with every document (datatrove's runs on across a task's documents): a document's text is
then a function of the document alone, the same whichever task, task count or order processed it, so
``cuvee trace --verify`` can replay the stage on one re-read record and get the output row's text.
"""

from __future__ import annotations

import ipaddress
import re

from datatrove.data import DocumentsPipeline
from datatrove.pipeline.base import PipelineStep
from pydantic import Field

from cuvee.pipeline.registry import BuildContext, StageParams, register_stage

EMAIL_RE = re.compile(
    r"\b[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(?:\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*@"
    r"(?:(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?\.)+[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
    r"|\[(?:(?:25[0-5]|2[0-4][0-9]|[01]?[0-9][0-9]?)\.){3}(?:25[0-5]|2[0-4][0-9]|[01]?[0-9][0-9]?|[A-Za-z0-9-]*[A-Za-z0-9]:)])"
)
IPV4_RE = re.compile(r"(?:(?:25[0-5]|2[0-4][0-9]|[01]?[0-9][0-9]?)\.){3}(?:25[0-5]|2[0-4][0-9]|[01]?[0-9][0-9]?)")

EMAIL_REPLACEMENTS = ("email@example.com", "firstname.lastname@example.org")
IP_REPLACEMENTS = ("22.214.171.124", "126.96.36.199", "188.8.131.52", "184.108.40.206", "220.127.116.11", "18.104.22.168")


def is_public_ip(text: str) -> bool:
    try:
        return ipaddress.ip_address(text).is_global
    except ValueError:
        return False


class PIIAnonymizer(PipelineStep):
    """Replaces e-mails and (public) IPv4 addresses in the text; counts replacements; drops nothing."""

    name = "🕵️ PII"
    type = "✂️ - FORMAT"

    def __init__(self, emails: bool = True, ips: bool = True, only_public_ips: bool = True,
                 email_replacements: tuple[str, ...] = EMAIL_REPLACEMENTS, ip_replacements: tuple[str, ...] = IP_REPLACEMENTS):
        super().__init__()
        self.emails = emails
        self.ips = ips
        self.only_public_ips = only_public_ips
        self.email_replacements = tuple(email_replacements)
        self.ip_replacements = tuple(ip_replacements)
        self._email_i = 0
        self._ip_i = 0

    def anonymize(self, text: str) -> tuple[str, int, int]:
        """(new text, e-mails replaced, IPs replaced); the replacements cycle from the first in every text."""
        self._email_i = self._ip_i = 0
        n_email = n_ip = 0
        if self.emails and "@" in text:
            def sub_email(m):
                nonlocal n_email
                if m.group(0) in self.email_replacements:
                    return m.group(0)
                n_email += 1
                r = self.email_replacements[self._email_i % len(self.email_replacements)]
                self._email_i += 1
                return r

            text = EMAIL_RE.sub(sub_email, text)
        if self.ips and "." in text:
            def sub_ip(m):
                nonlocal n_ip
                ip = m.group(0)
                if ip in self.ip_replacements:
                    return ip
                try:
                    addr = ipaddress.ip_address(ip)
                except ValueError:
                    return ip
                if self.only_public_ips and not addr.is_global:
                    return ip
                n_ip += 1
                r = self.ip_replacements[self._ip_i % len(self.ip_replacements)]
                self._ip_i += 1
                return r

            text = IPV4_RE.sub(sub_ip, text)
        return text, n_email, n_ip

    def run(self, data: DocumentsPipeline, rank: int = 0, world_size: int = 1) -> DocumentsPipeline:
        for doc in data or []:
            self.stat_update("total")
            with self.track_time():
                doc.text, n_email, n_ip = self.anonymize(doc.text)
            if n_email:
                self.stat_update("emails_replaced", value=n_email)
            if n_ip:
                self.stat_update("ips_replaced", value=n_ip)
            if n_email or n_ip:
                self.stat_update("docs_with_pii")
            self.stat_update("forwarded")
            yield doc


class PIIParams(StageParams):
    emails: bool = True
    ips: bool = True
    only_public_ips: bool = Field(True, description="leave private / loopback / reserved addresses alone (they identify no one)")
    email_replacements: list[str] = Field(default_factory=lambda: list(EMAIL_REPLACEMENTS), min_length=1)
    ip_replacements: list[str] = Field(default_factory=lambda: list(IP_REPLACEMENTS), min_length=1)


@register_stage("pii", PIIParams)
def build_pii(p: PIIParams, ctx: BuildContext):
    """FineWeb PII anonymisation: replace e-mail addresses and public IP addresses."""
    return [PIIAnonymizer(p.emails, p.ips, p.only_public_ips, tuple(p.email_replacements), tuple(p.ip_replacements))]

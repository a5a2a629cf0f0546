from __future__ import annotations

import tomllib
from collections.abc import Mapping

from django import forms
from django.utils import timezone
from django.utils.translation import gettext, ngettext
from django.utils.translation import gettext_lazy as _

from apps.simulator import ClusterError, PolicyError, check_policies, parse_policies
from apps.simulator.cluster import cluster_from_toml
from apps.simulator.trace import TraceError, check_jobs_header
from apps.whatif.models import WhatIfRun
from apps.whatif.selectors import quota_jobs
from apps.whatif.services import whatif_trace_kept

MAX_TRACE_BYTES = 50 * 1024 * 1024
MAX_DAYS = 90
_HEAD_BYTES = 64 * 1024  # enough for any header line of a job trace


class WhatIfForm(forms.Form):
    title = forms.CharField(max_length=128, required=False, label=_("Title"))
    source = forms.ChoiceField(
        label=_("Source"),
        choices=WhatIfRun.Source.choices,
        initial=WhatIfRun.Source.JOBS,
        widget=forms.RadioSelect,
    )
    days = forms.IntegerField(
        min_value=1, max_value=MAX_DAYS, initial=7, required=False, label=_("Last N days")
    )
    trace = forms.FileField(
        required=False,
        label=_("Trace (CSV)"),
        help_text=_("an openb pod list or the simulator's own CSV (docs/simulator.md)"),
    )
    mode = forms.ChoiceField(
        label=_("Mode"),
        choices=[
            ("replay", _("Replay at the trace's times")),
            ("fill", _("Fill until saturated")),
        ],
        initial="replay",
    )
    policies = forms.CharField(
        label=_("Policies"),
        max_length=512,
        required=False,
        help_text=_(
            "comma-separated, e.g. ours,kueue,ours+ckpt=600 (empty: the mode's default; a "
            "replay's placed as the live scheduler places)"
        ),
    )
    cluster_file = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 16, "class": "mono", "spellcheck": "false"}),
        label=_("Changed cluster file (TOML)"),
        help_text=_("its dedicated pools' nodes and its quota tree are what the run changes"),
    )

    def __init__(self, *args, kept: Mapping[str, str] | None = None, **kwargs) -> None:
        """`kept`: the uploads kept for this user (token: file name), one of which the form
        may name (`kept_trace`) instead of a file chosen again."""
        super().__init__(*args, **kwargs)
        self.kept = dict(kept or {})
        self.kept_token = ""  # the kept upload the form holds, shown beside its field

    @property
    def kept_name(self) -> str:
        return self.kept.get(self.kept_token, "")

    def keep_trace(self, token: str, name: str) -> None:
        """Hold an upload kept after this form was refused, for the form shown again."""
        self.kept[token], self.kept_token = name, token

    def clean_trace(self):
        """At most 50 MB, and a job trace by its header (its rows are read by the run, which
        says which line is wrong). With no file chosen, the upload kept from the form's last
        try, if it names one."""
        trace = self.cleaned_data.get("trace")
        if trace is None:
            token = self.data.get("kept_trace", "")
            if token in self.kept:
                trace = whatif_trace_kept(token=token, name=self.kept[token])
                self.kept_token = token if trace is not None else ""
            return trace  # checked when it was kept
        if trace.size > MAX_TRACE_BYTES:
            raise forms.ValidationError(gettext("at most 50 MB"))
        trace.seek(0)
        head = trace.read(_HEAD_BYTES)
        trace.seek(0)
        try:
            check_jobs_header(head, trace.name)
        except TraceError as e:
            raise forms.ValidationError(str(e)) from e
        return trace

    def clean_policies(self):
        return self.cleaned_data.get("policies", "").strip()

    def clean_cluster_file(self):
        """Valid TOML that the simulator can make a cluster of, said beside the field now
        rather than as a failed run later (the run checks again: the file is kept)."""
        text = self.cleaned_data["cluster_file"]
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as e:
            raise forms.ValidationError(gettext("not valid TOML: %(error)s") % {"error": e}) from e
        try:
            cluster_from_toml(data)
        except (ClusterError, ValueError) as e:
            raise forms.ValidationError(str(e)) from e
        return text

    def clean(self):
        data = super().clean()
        if data.get("policies"):  # empty: the mode's defaults, which hold
            try:
                check_policies(parse_policies(data["policies"]), data.get("mode") or "replay")
            except PolicyError as e:
                self.add_error("policies", str(e))
        if data.get("source") == WhatIfRun.Source.UPLOAD and not data.get("trace"):
            self.add_error(
                "trace", gettext("choose a trace file, or replay the cluster's own jobs")
            )
        if data.get("source") == WhatIfRun.Source.JOBS and "days" not in self.errors:
            days = data.get("days")
            if not days:
                self.add_error("days", gettext("how many days of jobs to replay"))
            elif not quota_jobs(days=days, now=timezone.now()).exists():
                self.add_error(
                    "days",
                    ngettext(
                        "no quota job was submitted in the last %(days)d day: nothing to "
                        "replay (choose more days, or a trace file)",
                        "no quota job was submitted in the last %(days)d days: nothing to "
                        "replay (choose more days, or a trace file)",
                        days,
                    )
                    % {"days": days},
                )
        return data

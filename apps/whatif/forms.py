from __future__ import annotations

import tomllib

from django import forms

from apps.simulator import DEFAULTS, PolicyError, parse_policies
from apps.whatif.models import WhatIfRun

MAX_TRACE_BYTES = 50 * 1024 * 1024
MAX_DAYS = 90


class WhatIfForm(forms.Form):
    title = forms.CharField(max_length=128, required=False, label="Title")
    source = forms.ChoiceField(
        choices=WhatIfRun.Source.choices, initial=WhatIfRun.Source.JOBS, widget=forms.RadioSelect
    )
    days = forms.IntegerField(
        min_value=1, max_value=MAX_DAYS, initial=7, required=False, label="Last N days"
    )
    trace = forms.FileField(
        required=False,
        label="Trace (CSV)",
        help_text="an openb pod list or the simulator's own CSV (docs/simulator.md)",
    )
    mode = forms.ChoiceField(
        choices=[("replay", "Replay at the trace's times"), ("fill", "Fill until saturated")],
        initial="replay",
    )
    policies = forms.CharField(
        max_length=512,
        required=False,
        help_text="comma-separated, e.g. ours,kueue,ours+ckpt=600 (empty: the mode's default)",
    )
    cluster_file = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 16, "class": "mono", "spellcheck": "false"}),
        label="Changed cluster file (TOML)",
        help_text="its dedicated pools' nodes and its quota tree are what the run changes",
    )

    def clean_trace(self):
        trace = self.cleaned_data.get("trace")
        if trace is not None and trace.size > MAX_TRACE_BYTES:
            raise forms.ValidationError("at most 50 MB")
        return trace

    def clean_policies(self):
        text = self.cleaned_data.get("policies", "").strip()
        try:
            parse_policies(text or DEFAULTS["replay"])
        except PolicyError as e:
            raise forms.ValidationError(str(e)) from e
        return text

    def clean_cluster_file(self):
        text = self.cleaned_data["cluster_file"]
        try:
            tomllib.loads(text)
        except tomllib.TOMLDecodeError as e:
            raise forms.ValidationError(f"not valid TOML: {e}") from e
        return text

    def clean(self):
        data = super().clean()
        if data.get("source") == WhatIfRun.Source.UPLOAD and not data.get("trace"):
            self.add_error("trace", "choose a trace file, or replay the cluster's own jobs")
        if data.get("source") == WhatIfRun.Source.JOBS and not data.get("days"):
            self.add_error("days", "how many days of jobs to replay")
        return data

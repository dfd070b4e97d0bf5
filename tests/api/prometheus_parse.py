"""Parses OpenMetrics text from stdin with the Prometheus project's own
Python client (prometheus_client.openmetrics.parser, strict: it refuses
text that breaks the OpenMetrics rules) and prints the metric families as
JSON, for tests/api/metrics.rs.

Exits non-zero when the text does not parse. scripts/test.sh installs the
client (scripts/ensure-prometheus-client.sh)."""

import json
import sys

from prometheus_client.openmetrics.parser import text_string_to_metric_families

families = [
    {
        "name": family.name,
        "type": family.type,
        "help": family.documentation,
        "samples": [
            {"name": s.name, "labels": s.labels, "value": s.value}
            for s in family.samples
        ],
    }
    for family in text_string_to_metric_families(sys.stdin.read())
]
# allow_nan=False: a NaN or infinite value fails the test too.
json.dump(families, sys.stdout, allow_nan=False)

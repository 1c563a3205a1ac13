"""Tests of `tomori.domain`: models, constraints, input rules, migrations, settings, crypto."""

# tests/tools: reference generators, run by hand where their dependencies exist.
# gen_hf_fixtures.py needs torch and transformers; see tests/tools/README.
EXTRA_DIST += tests/tools/README tests/tools/gen_hf_fixtures.py

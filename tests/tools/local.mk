# tests/tools: reference generators (run where torch exists) and comparison helpers.
EXTRA_DIST += tests/tools/gen_hf_fixtures.py tests/tools/README tests/tools/cmp_tensors.py

# Hugging Face parity: dsv4ctl logits against the committed fixtures.
TESTS += tests/integ/t-hf-parity-logits.sh
EXTRA_DIST += tests/integ/t-hf-parity-logits.sh
dist_check_DATA = $(wildcard $(srcdir)/tests/fixtures/hf/*/*.json) \
	$(wildcard $(srcdir)/tests/fixtures/hf/*/*.safetensors) tests/fixtures/hf/manifest.json

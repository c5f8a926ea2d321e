# etc: the shipped configurations, installed beside each other in $(sysconfdir)/dsv4d;
# dsv4d.ini there is what dsv4d reads without -c. tests/cli/t-validate-etc-configs.sh
# validates every one of them.
dsv4dconfdir = $(sysconfdir)/dsv4d
dist_dsv4dconf_DATA = \
	etc/dsv4d.ini \
	etc/unified.ini \
	etc/unified-bf16-lpm.ini \
	etc/unified-f32-reference.ini \
	etc/unified-hostcache-sync.ini \
	etc/unified-hostcache-async.ini \
	etc/pd-prefill.ini \
	etc/pd-decode.ini \
	etc/pd-prefill-ucx.ini \
	etc/pd-decode-ucx.ini

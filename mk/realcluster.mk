# The real-cluster tier (issue 12): Kubernetes v1.20.2 built from Debian's source package, run in a
# loopback-only network namespace. Included from the Makefile; also usable as
# `make -f mk/realcluster.mk TARGET` from the repository root. Needs root.
REALCLUSTER_VENV ?= .venv
# Included from the Makefile, $(STAMP) is its virtual-environment target: build it first.
# With `make -f mk/realcluster.mk` alone it is empty and the venv must exist.
REALCLUSTER_DEPS := $(STAMP)
REALCLUSTER_PY := $(REALCLUSTER_VENV)/bin/python
REALCLUSTER_NETNS ?= kuber-rc
REALCLUSTER_STATE ?= /tmp/kuber-rc
REALCLUSTER_ENV := KUBER_REALCLUSTER_NETNS=$(REALCLUSTER_NETNS) KUBER_REALCLUSTER_STATE=$(REALCLUSTER_STATE)

.PHONY: realcluster realcluster-down realcluster-test realcluster-build realcluster-bench

## realcluster-build: build (or reuse) the v1.20.2 binaries in ~/.cache/kuber-exec/realcluster/v1.20.2.
realcluster-build:
	bash scripts/realcluster/build.sh

## realcluster: bring the cluster up for manual use; prints a kubeconfig and a kubectl line.
realcluster: realcluster-build $(REALCLUSTER_DEPS)
	$(REALCLUSTER_ENV) $(REALCLUSTER_PY) scripts/realcluster/cluster.py netns-up
	$(REALCLUSTER_ENV) nsenter --net=/run/netns/$(REALCLUSTER_NETNS) $(REALCLUSTER_PY) scripts/realcluster/cluster.py up

## realcluster-down: stop every process it started, by PID, and remove what it wrote.
realcluster-down: $(REALCLUSTER_DEPS)
	$(REALCLUSTER_ENV) $(REALCLUSTER_PY) scripts/realcluster/cluster.py down

## realcluster-test: build or reuse, start, run tests/realcluster in the namespace, tear down.
realcluster-test: $(REALCLUSTER_DEPS)
	$(REALCLUSTER_ENV) VENV=$(REALCLUSTER_VENV) bash scripts/realcluster/run-tests.sh

## realcluster-bench: with the cluster up (make realcluster), kuber-exec vs kubectl and the official
## client on the same pod: throughput and small-command latency, as ratios.
realcluster-bench: $(REALCLUSTER_DEPS)
	$(REALCLUSTER_ENV) KUBER_REALCLUSTER=$(REALCLUSTER_STATE)/cluster.json nsenter --net=/run/netns/$(REALCLUSTER_NETNS) $(REALCLUSTER_PY) scripts/realcluster/bench.py

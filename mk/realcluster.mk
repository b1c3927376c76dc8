# The real-cluster tier: Kubernetes v1.20.2 built from Debian's source package, and a current
# release (K8S=1.37) built from Go modules (scripts/realcluster/k8s-1.37/), each run in a
# loopback-only network namespace, one at a time. Included from the Makefile; also usable as
# `make -f mk/realcluster.mk TARGET` from the repository root. Needs root.
REALCLUSTER_VENV ?= .venv
# Included from the Makefile, $(STAMP) is its virtual-environment target: build it first.
# With `make -f mk/realcluster.mk` alone it is empty and the venv must exist.
REALCLUSTER_DEPS := $(STAMP)
REALCLUSTER_PY := $(REALCLUSTER_VENV)/bin/python
REALCLUSTER_NETNS ?= kuber-rc
REALCLUSTER_STATE ?= /tmp/kuber-rc
# The release for realcluster, realcluster-build and realcluster-bench: 1.37 (current) or 1.20.
K8S ?= 1.37
# realcluster-test runs every release in turn unless K8S is given on the command line.
REALCLUSTER_TEST_VERSIONS := $(if $(filter command line environment,$(origin K8S)),$(K8S),1.37 1.20)
REALCLUSTER_ENV := KUBER_REALCLUSTER_NETNS=$(REALCLUSTER_NETNS) KUBER_REALCLUSTER_STATE=$(REALCLUSTER_STATE) KUBER_REALCLUSTER_K8S=$(K8S)

.PHONY: realcluster realcluster-down realcluster-test realcluster-build realcluster-bench realcluster-crowd

## realcluster-build: build (or reuse) the binaries in ~/.cache/kuber-exec/realcluster/<version>
## (Go's caches in ~/.cache/kuber-exec/go).
realcluster-build:
	bash scripts/realcluster/build.sh $(K8S)

## realcluster: bring the cluster up for manual use; prints a kubeconfig and a kubectl line.
realcluster: realcluster-build $(REALCLUSTER_DEPS)
	$(REALCLUSTER_ENV) $(REALCLUSTER_PY) scripts/realcluster/cluster.py netns-up
	$(REALCLUSTER_ENV) nsenter --net=/run/netns/$(REALCLUSTER_NETNS) $(REALCLUSTER_PY) scripts/realcluster/cluster.py up

## realcluster-down: stop every process it started, by PID, and remove what it wrote.
realcluster-down: $(REALCLUSTER_DEPS)
	$(REALCLUSTER_ENV) $(REALCLUSTER_PY) scripts/realcluster/cluster.py down

## realcluster-test: for each release (1.37, then 1.20; or K8S=...): build or reuse, start, run
## tests/realcluster in the namespace, tear down. Fails if any release failed.
realcluster-test: $(REALCLUSTER_DEPS)
	@rc=0; for v in $(REALCLUSTER_TEST_VERSIONS); do \
	    $(REALCLUSTER_ENV) KUBER_REALCLUSTER_K8S=$$v VENV=$(REALCLUSTER_VENV) \
	        bash scripts/realcluster/run-tests.sh || rc=1; \
	done; exit $$rc

## realcluster-crowd: with the cluster up (make realcluster), a crowd of S sessions ending at once
## and a killed replica's: processes left (benchmarks/results/realcluster_crowd_1_<minor>.json).
realcluster-crowd: $(REALCLUSTER_DEPS)
	$(REALCLUSTER_ENV) KUBER_REALCLUSTER=$(REALCLUSTER_STATE)/cluster.json nsenter --net=/run/netns/$(REALCLUSTER_NETNS) $(REALCLUSTER_PY) scripts/realcluster/crowd.py $(ARGS)

## realcluster-bench: with the cluster up (make realcluster), kuber-exec vs kubectl and the official
## client on the same pod: throughput and small-command latency, as ratios.
realcluster-bench: $(REALCLUSTER_DEPS)
	$(REALCLUSTER_ENV) KUBER_REALCLUSTER=$(REALCLUSTER_STATE)/cluster.json nsenter --net=/run/netns/$(REALCLUSTER_NETNS) $(REALCLUSTER_PY) scripts/realcluster/bench.py

module kuber-exec.dev/realcluster/distroless

go 1.21

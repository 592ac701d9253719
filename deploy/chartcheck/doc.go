// Package chartcheck renders the Helm chart under deploy/helm/kandle with
// the Helm SDK (no helm binary, no cluster) for its default values and every
// values file under its examples/, and checks each rendered object strictly
// against the Kubernetes, Prometheus Operator and KEDA API types: an unknown
// or misspelled field fails the test. On top of the types it checks what the
// API server would not: probes, ports and selectors agree, every volume,
// ConfigMap and ServiceAccount a pod names is rendered, the grace period
// outlasts the transaction timeout, and the KEDA ScaledObject triggers on
// exactly the consumer groups the StatefulSet's topology runs.
//
// It is a module of its own so the Helm SDK and the API types stay out of
// kandle's go.mod; `make test` runs it.
package chartcheck

// Package helm holds the tests of the Helm chart in mango/: lint, strict
// decoding of every rendered document into its Kubernetes type, and the
// chart's invariants (security contexts, no database credential in worker
// pods, RBAC of the k8s pool, hooks, network policy, values schema).
package helm

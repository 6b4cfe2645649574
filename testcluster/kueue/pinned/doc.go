// Package pinned checks that what the repository says about Kueue is what the pinned module
// (sigs.k8s.io/kueue in ../go.mod) is: its version in the docs, and the API groups, versions and
// label keys that gpuspawner's Python side writes by hand (gpuspawner/queue).
package pinned

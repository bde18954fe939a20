// Package vault is the regulator's copy of Tresor's stream: it follows the
// operator's stream with read-only credentials, appends every event as
// stored to a stream of its own (same sequences, same bytes), verifies
// each one with the incremental auditor, and raises alarms (a violation, a
// gap, a seal overdue, the source unreachable, a fork) within seconds, on a
// status document and Prometheus metrics. It imports eventstore and audit,
// nothing of the write side: the operator's code is what it checks.
package vault

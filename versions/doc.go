// Package versions compares the versions of an application as its
// installs name them: a Debian package's (1.120.2+bookworm1,
// 10.10.7+deb12, 1:2.0~rc1-3) and an image's tag (v1.120.2, 10.10.7,
// 0.14.1-tensorrt). migrate init uses it to write images never older
// than what an old VM runs, and the runbook's not_older function to
// refuse, at plan, an image that is.
//
// It imports nothing of the module: a version is plain text, read by
// package inventory and package runbooks alike.
package versions

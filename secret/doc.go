// Package secret keeps secrets out of text. A Scrubber learns secret
// strings — the plain values of sensitive variables, the values a step's
// configuration marks sensitive, the keys a provider loads — and replaces
// them wherever they turn up in free text: command output, error messages,
// plan diffs. The engine and every provider use it, so that a secret
// interpolated into a longer string ("echo ${var.token}") is caught too,
// and so is a secret in the forms it takes on the way out (forms.go:
// shell-quoted, JSON-escaped, base64, URL-encoded).
//
// A Writer scrubs a stream by whole lines, bounded: a line longer than
// MaxLine is cut where no secret straddles the cut. Visible makes the
// terminal controls in a text visible, for what commands and guests print.
//
// Marks on cty values (phases.SensitiveMark) say what is secret; this
// package only finds and replaces.
package secret

// Package secret keeps secrets out of text. A Scrubber learns secret
// strings — the plain values of sensitive variables, the values a step's
// configuration marks sensitive, the keys a provider loads — and replaces
// them wherever they turn up in free text: command output, error messages,
// plan diffs. The engine and every provider use it, so that a secret
// interpolated into a longer string ("echo ${var.token}") is caught too.
//
// Marks on cty values (phases.SensitiveMark) say what is secret; this
// package only finds and replaces.
package secret

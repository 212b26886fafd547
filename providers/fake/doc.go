// Package fake is a programmable provider for engine tests, after
// Terraform's providers/testing MockProvider. It records every call in
// XCalled and XRequest fields and counts applies per address; an XFn field,
// when set, decides the response. Without one it behaves like a well-mannered
// provider of a single step type, "fake_step".
//
// Real providers live beside it (providers/local, ...); all of them, the
// fake included, pass the conformance suite in providers/providertest.
package fake

package phases

// UnknownText is how a diff shows a value not known until the step is
// applied. Providers write it (providers/sdk); the engine reads it to name
// the steps such a value waits for. It lives here because both may import
// phases and neither may import the other.
const UnknownText = "(known after apply)"

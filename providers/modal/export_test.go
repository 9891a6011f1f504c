package modal

// Redact is redact, for the tests.
var Redact = redact

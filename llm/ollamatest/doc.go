// Package ollamatest runs a real Ollama server for end-to-end tests, with a
// tiny model the test writes itself (no model can be downloaded here). Its
// answers are nonsense; what it proves is that every request secgpt sends
// is accepted and every answer read. It must never be imported outside
// tests.
package ollamatest

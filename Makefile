# The two commands of the README.
.PHONY: chat test

# The terminal assistant (the model endpoint from the environment, or the
# built-in simulated model when none is set).
chat:
	go build -tags goolm -o bin/secgpt ./cmd/secgpt
	bin/secgpt chat

# Every test: vet, race-enabled unit and end-to-end tests, fuzzing, the
# binary's case studies.
test:
	scripts/test.sh

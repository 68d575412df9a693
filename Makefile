# The commands of the README, and the build they share.
.PHONY: build chat test dev

# goolm: mautrix's pure-Go Olm (no libolm). netgo, osusergo: pure-Go
# resolvers, so the static link needs no glibc NSS. A static binary starts
# each sandboxed spoke about 0.6 ms sooner.
TAGS = goolm,netgo,osusergo,sqlite_omit_load_extension
LDFLAGS = -linkmode external -extldflags -static

# bin/secgpt-spoke is the spoke binary (every app runs in it); secgpt finds
# it beside itself. It carries no bot library, which keeps a spoke small.
build:
	scripts/deps.sh
	CGO_ENABLED=1 go build -tags $(TAGS) -ldflags '$(LDFLAGS)' -o bin/secgpt ./cmd/secgpt
	CGO_ENABLED=1 go build -tags $(TAGS) -ldflags '$(LDFLAGS)' -o bin/secgpt-spoke ./cmd/secgpt-spoke

# The terminal assistant (the model endpoint from the environment, or the
# built-in simulated model when none is set).
chat: build
	bin/secgpt chat

# Every test: vet, race-enabled unit and end-to-end tests, fuzzing, the
# binary's case studies.
test:
	scripts/test.sh

# The Matrix bot against a local Dendrite on loopback (built once, cached):
# prints the homeserver URL and a login for any Matrix client.
dev: build
	scripts/dev.sh

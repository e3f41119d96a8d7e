package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"strings"

	"github.com/agentbus/agentbus/pkg/settings"
	"sigs.k8s.io/yaml"
)

// configCheckSynopsis heads config check -h.
const configCheckSynopsis = `usage: agentbus config check [flags]

Checks the configuration serve would run with (the config file, AGENTBUS_*
variables and these flags, over the defaults) without serving or reaching
NATS. A valid one is printed in full, secrets masked, and agentbus exits 0;
otherwise each wrong setting is named, and agentbus exits 1.`

// configCmd runs agentbus config <subcommand>.
func configCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	switch {
	case len(args) > 0 && args[0] == "check":
		return configCheck(ctx, args[1:], stdout, stderr)
	case len(args) > 0 && isHelp(args[0]):
		fmt.Fprintln(stdout, configCheckSynopsis+"\n\nRun 'agentbus config check -h' for its flags.")
		return nil
	}
	return errors.New("usage: agentbus config check [flags]")
}

// errInvalidConfig ends config check when a problem was printed.
var errInvalidConfig = errors.New("the configuration is not valid")

func configCheck(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("config check", configCheckSynopsis, stderr)
	cfg, err := loadConfig(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		return err
	}
	problems := cfg.Problems()
	if err != nil && len(problems) == 0 || err != nil && !strings.HasPrefix(err.Error(), "invalid configuration: ") {
		// A file that cannot be read or decoded, a flag or variable that
		// cannot be parsed: nothing further was checked.
		problems = strings.Split(err.Error(), "\n")
	}
	if len(problems) > 0 {
		fmt.Fprintf(stderr, "the configuration has %d problem(s):\n", len(problems))
		for _, p := range problems {
			fmt.Fprintf(stderr, "  - %s\n", p)
		}
		return errInvalidConfig
	}
	out, err := effectiveSettings(cfg)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "# the configuration is valid; the settings serve would run with, secrets masked:\n%s", out)
	return nil
}

// effectiveSettings is cfg as YAML, in the config file's keys, with every
// secret masked: config.Secret settings, and the passwords of nats.url.
func effectiveSettings(cfg settings.Config) ([]byte, error) {
	cfg.NATS.URL = maskURLs(cfg.NATS.URL)
	return yaml.Marshal(cfg)
}

// maskURLs masks the password of each of the comma-separated URLs in s.
func maskURLs(s string) string {
	if s == "" {
		return s
	}
	parts := strings.Split(s, ",")
	for i, p := range parts {
		u, err := url.Parse(strings.TrimSpace(p))
		if err != nil {
			if strings.Contains(p, "@") {
				parts[i] = "***"
			}
			continue
		}
		if u.User == nil {
			continue
		}
		user := "***" // a token alone
		if _, has := u.User.Password(); has {
			user = u.User.Username() + ":***"
		}
		u.User = nil
		scheme, rest, _ := strings.Cut(u.String(), "://")
		parts[i] = scheme + "://" + user + "@" + rest
	}
	return strings.Join(parts, ",")
}

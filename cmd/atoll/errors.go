package main

import "fmt"

func usageErr(flag string, err error) error { return fmt.Errorf("%s: %w", flag, err) }

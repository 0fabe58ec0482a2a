# Shorthands for ./dev, which makes the virtualenv and installs what is missing.
.PHONY: demo test matrix lint bench bench-quick

demo:
	./dev demo
test:
	./dev test
matrix:
	./dev matrix
lint:
	./dev lint
bench:
	./dev bench
bench-quick:
	./dev bench --quick --out bench-quick

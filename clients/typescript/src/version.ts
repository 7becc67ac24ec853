// The client's version: package.json's, which tests/typescript keeps equal to the Python
// package's __version__ (coordinator/__init__.py), the one version source of the repository.
export const VERSION = "0.1.0";

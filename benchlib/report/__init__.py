"""The summary rendered (notebook to HTML) and its plots. Imports anything below the command line."""

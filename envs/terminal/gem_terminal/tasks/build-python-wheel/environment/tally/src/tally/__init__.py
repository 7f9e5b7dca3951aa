"""Word counts without stopwords."""

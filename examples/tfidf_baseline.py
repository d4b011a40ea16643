"""The classical baseline for a single-label recipe: TF-IDF (words and bigrams) + logistic regression, trained on the
recipe's own training documents (same data settings, seed and subsample) and scored once on its test split.
scikit-learn defaults besides the n-gram range; nothing is tuned.

    python examples/tfidf_baseline.py recipes/imdb_rating.yaml
"""
import sys
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import accuracy_score, f1_score
import longbert
from longbert.backbone import load_tokenizer
from longbert.data import load_corpus

recipe = longbert.load_recipe(sys.argv[1])
corpus = load_corpus(recipe.data, load_tokenizer("minilm"), recipe.seed, recipe.model.problem_type == "multi_label")
train, test = corpus.splits["train"], corpus.splits["test"]
vec = TfidfVectorizer(ngram_range=(1, 2), min_df=2, sublinear_tf=True)
X = vec.fit_transform(train["text"])
clf = LogisticRegression(max_iter=2000).fit(X, train["labels"])
pred = clf.predict(vec.transform(test["text"]))
print(f"{len(train)} train / {len(test)} test: accuracy {accuracy_score(test['labels'], pred):.4f}, macro-F1 {f1_score(test['labels'], pred, average='macro'):.4f}")

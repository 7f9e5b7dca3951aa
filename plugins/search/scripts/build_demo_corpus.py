# ruff: noqa: E501 - one fact per line reads better than wrapped strings
"""Write gem_tool_search/data/demo_corpus.jsonl: short encyclopedia-style passages for tests and demos.

The facts below are written for this project; rerun after editing them:
``python plugins/search/scripts/build_demo_corpus.py``.
"""

from __future__ import annotations

import json
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "gem_tool_search" / "data" / "demo_corpus.jsonl"

# name | capital | continent | main language(s) | currency | one more fact
COUNTRIES = """\
France|Paris|Europe|French|euro|The Eiffel Tower and the Louvre museum are in Paris.
Germany|Berlin|Europe|German|euro|Germany was reunified in 1990 after the fall of the Berlin Wall in 1989.
Italy|Rome|Europe|Italian|euro|Vatican City is an independent enclave inside Rome.
Spain|Madrid|Europe|Spanish|euro|The Prado Museum in Madrid holds works by Velazquez and Goya.
Portugal|Lisbon|Europe|Portuguese|euro|Lisbon was largely destroyed by an earthquake in 1755.
United Kingdom|London|Europe|English|pound sterling|The United Kingdom is made up of England, Scotland, Wales and Northern Ireland.
Ireland|Dublin|Europe|Irish and English|euro|Ireland joined the European Economic Community in 1973.
Netherlands|Amsterdam|Europe|Dutch|euro|The seat of government of the Netherlands is The Hague, not the capital Amsterdam.
Belgium|Brussels|Europe|Dutch, French and German|euro|Brussels hosts the main institutions of the European Union.
Switzerland|Bern|Europe|German, French, Italian and Romansh|Swiss franc|Geneva in Switzerland hosts the headquarters of the Red Cross.
Austria|Vienna|Europe|German|euro|Mozart was born in Salzburg, Austria, in 1756.
Poland|Warsaw|Europe|Polish|zloty|Marie Curie was born in Warsaw in 1867.
Sweden|Stockholm|Europe|Swedish|Swedish krona|The Nobel Prize ceremonies are held in Stockholm, except the Peace Prize.
Norway|Oslo|Europe|Norwegian|Norwegian krone|The Nobel Peace Prize is awarded in Oslo.
Finland|Helsinki|Europe|Finnish and Swedish|euro|Finland has about 188,000 lakes.
Denmark|Copenhagen|Europe|Danish|Danish krone|Greenland is an autonomous territory of the Kingdom of Denmark.
Greece|Athens|Europe|Greek|euro|The first modern Olympic Games were held in Athens in 1896.
Russia|Moscow|Europe and Asia|Russian|ruble|Russia is the largest country in the world by area.
Ukraine|Kyiv|Europe|Ukrainian|hryvnia|The Chernobyl nuclear disaster happened in Ukraine in 1986.
Turkey|Ankara|Europe and Asia|Turkish|Turkish lira|Istanbul, the largest city of Turkey, spans Europe and Asia across the Bosphorus.
Egypt|Cairo|Africa|Arabic|Egyptian pound|The Great Pyramid of Giza stands near Cairo.
Nigeria|Abuja|Africa|English|naira|Nigeria is the most populous country in Africa; Lagos is its largest city.
Kenya|Nairobi|Africa|Swahili and English|Kenyan shilling|Mount Kenya is the second highest mountain in Africa.
South Africa|Pretoria|Africa|eleven official languages including Zulu, Xhosa, Afrikaans and English|rand|South Africa has three capitals: Pretoria, Cape Town and Bloemfontein.
Ethiopia|Addis Ababa|Africa|Amharic|birr|Addis Ababa hosts the headquarters of the African Union.
Morocco|Rabat|Africa|Arabic and Berber|Moroccan dirham|Casablanca is the largest city of Morocco.
Ghana|Accra|Africa|English|cedi|Ghana was the first sub-Saharan African colony to gain independence, in 1957.
China|Beijing|Asia|Mandarin Chinese|renminbi (yuan)|The Great Wall of China stretches for thousands of kilometres across northern China.
Japan|Tokyo|Asia|Japanese|yen|Mount Fuji is the highest mountain in Japan at 3,776 metres.
South Korea|Seoul|Asia|Korean|won|Seoul hosted the Summer Olympic Games in 1988.
India|New Delhi|Asia|Hindi and English|Indian rupee|The Taj Mahal is in Agra, India.
Pakistan|Islamabad|Asia|Urdu and English|Pakistani rupee|Karachi is the largest city of Pakistan.
Bangladesh|Dhaka|Asia|Bengali|taka|Bangladesh became independent from Pakistan in 1971.
Indonesia|Jakarta|Asia|Indonesian|rupiah|Indonesia is made up of more than 17,000 islands.
Thailand|Bangkok|Asia|Thai|baht|Thailand was formerly known as Siam.
Vietnam|Hanoi|Asia|Vietnamese|dong|Ho Chi Minh City, formerly Saigon, is the largest city of Vietnam.
Philippines|Manila|Asia|Filipino and English|Philippine peso|The Philippines is an archipelago of more than 7,000 islands.
Saudi Arabia|Riyadh|Asia|Arabic|Saudi riyal|Mecca, the holiest city of Islam, is in Saudi Arabia.
Iran|Tehran|Asia|Persian|Iranian rial|Persepolis was the ceremonial capital of the Achaemenid Empire.
Israel|Jerusalem|Asia|Hebrew|new shekel|The Dead Sea shore is the lowest land point on Earth.
United States|Washington, D.C.|North America|English|United States dollar|The United States declared independence on July 4, 1776.
Canada|Ottawa|North America|English and French|Canadian dollar|Canada has the longest coastline of any country.
Mexico|Mexico City|North America|Spanish|Mexican peso|Mexico City was built on the ruins of the Aztec capital Tenochtitlan.
Cuba|Havana|North America|Spanish|Cuban peso|Cuba is the largest island in the Caribbean.
Brazil|Brasilia|South America|Portuguese|real|Brasilia was inaugurated as the capital of Brazil in 1960, replacing Rio de Janeiro.
Argentina|Buenos Aires|South America|Spanish|Argentine peso|Aconcagua in Argentina is the highest mountain in the Americas.
Chile|Santiago|South America|Spanish|Chilean peso|The Atacama Desert in Chile is one of the driest places on Earth.
Peru|Lima|South America|Spanish and Quechua|sol|Machu Picchu is an Inca citadel in the Andes of Peru.
Colombia|Bogota|South America|Spanish|Colombian peso|Colombia is named after Christopher Columbus.
Australia|Canberra|Oceania|English|Australian dollar|Sydney is the largest city of Australia, but Canberra is its capital.
New Zealand|Wellington|Oceania|English and Maori|New Zealand dollar|New Zealand was the first country to give women the right to vote, in 1893.
"""

# name | symbol | atomic number | fact
ELEMENTS = """\
Hydrogen|H|1|Hydrogen is the lightest and most abundant element in the universe.
Helium|He|2|Helium is a noble gas used to fill balloons; it was first detected in the spectrum of the Sun.
Lithium|Li|3|Lithium is the lightest metal and is used in rechargeable batteries.
Carbon|C|6|Carbon forms diamond and graphite and is the basis of organic chemistry.
Nitrogen|N|7|Nitrogen makes up about 78 percent of Earth's atmosphere.
Oxygen|O|8|Oxygen makes up about 21 percent of Earth's atmosphere and is needed for respiration.
Fluorine|F|9|Fluorine is the most electronegative element.
Neon|Ne|10|Neon glows red-orange in advertising signs.
Sodium|Na|11|Sodium combines with chlorine to form table salt, sodium chloride.
Magnesium|Mg|12|Magnesium burns with a brilliant white light.
Aluminium|Al|13|Aluminium is the most abundant metal in Earth's crust.
Silicon|Si|14|Silicon is the main material of computer chips.
Phosphorus|P|15|Phosphorus was discovered by Hennig Brand in 1669.
Sulfur|S|16|Sulfur is a yellow solid that smells of rotten eggs when combined with hydrogen.
Chlorine|Cl|17|Chlorine is used to disinfect drinking water and swimming pools.
Potassium|K|19|Potassium's symbol K comes from the Latin word kalium.
Calcium|Ca|20|Calcium is the main mineral of bones and teeth.
Iron|Fe|26|Iron is the main component of steel; its symbol Fe comes from the Latin ferrum.
Copper|Cu|29|Copper is an excellent conductor of electricity used in wires.
Zinc|Zn|30|Zinc is used to galvanize steel against rust.
Silver|Ag|47|Silver has the highest electrical conductivity of any element; its symbol comes from the Latin argentum.
Tin|Sn|50|Tin alloyed with copper makes bronze.
Iodine|I|53|Iodine is added to table salt to prevent goitre.
Gold|Au|79|Gold's symbol Au comes from the Latin aurum; it does not tarnish.
Mercury|Hg|80|Mercury is the only metal that is liquid at room temperature.
Lead|Pb|82|Lead's symbol Pb comes from the Latin plumbum.
Radium|Ra|88|Radium was discovered by Marie and Pierre Curie in 1898.
Uranium|U|92|Uranium is used as fuel in nuclear reactors; it is named after the planet Uranus.
Plutonium|Pu|94|Plutonium was first produced in 1940 and is named after Pluto.
Polonium|Po|84|Polonium was discovered by Marie Curie and named after her homeland, Poland.
"""

# title | text (free-form passages)
PASSAGES = """\
Mercury (planet)|Mercury is the smallest planet in the Solar System and the closest to the Sun. A year on Mercury lasts 88 Earth days.
Venus|Venus is the second planet from the Sun and the hottest planet in the Solar System, because its thick carbon dioxide atmosphere traps heat.
Earth|Earth is the third planet from the Sun and the only known planet with life. It has one natural satellite, the Moon.
Mars|Mars is the fourth planet from the Sun, called the Red Planet because of iron oxide on its surface. Its moons are Phobos and Deimos. Olympus Mons on Mars is the tallest volcano in the Solar System.
Jupiter|Jupiter is the fifth planet from the Sun and the largest planet in the Solar System. Its Great Red Spot is a giant storm. Jupiter has more than 90 known moons, including Ganymede, the largest moon in the Solar System.
Saturn|Saturn is the sixth planet from the Sun, known for its bright rings of ice and rock. Its largest moon is Titan.
Uranus|Uranus is the seventh planet from the Sun. It was discovered by William Herschel in 1781 and rotates on its side.
Neptune|Neptune is the eighth and farthest known planet from the Sun. It was discovered in 1846 after being predicted mathematically.
Pluto|Pluto was discovered by Clyde Tombaugh in 1930 and reclassified as a dwarf planet in 2006.
Moon|The Moon is Earth's only natural satellite. Neil Armstrong became the first person to walk on the Moon on July 20, 1969, during the Apollo 11 mission.
Sun|The Sun is the star at the centre of the Solar System. Light from the Sun takes about 8 minutes and 20 seconds to reach Earth.
Milky Way|The Milky Way is the galaxy that contains the Solar System. Its nearest large neighbour is the Andromeda Galaxy.
Halley's Comet|Halley's Comet returns about every 76 years; it was last seen from Earth in 1986 and will return in 2061.
Hubble Space Telescope|The Hubble Space Telescope was launched in 1990 and is named after astronomer Edwin Hubble.
International Space Station|The International Space Station has been continuously occupied since November 2000. It orbits Earth about every 90 minutes.
Sputnik 1|Sputnik 1, launched by the Soviet Union on October 4, 1957, was the first artificial satellite.
Yuri Gagarin|Yuri Gagarin, a Soviet cosmonaut, became the first human in space on April 12, 1961, aboard Vostok 1.
Isaac Newton|Isaac Newton was an English physicist and mathematician who formulated the laws of motion and universal gravitation, published in the Principia in 1687.
Albert Einstein|Albert Einstein was a German-born physicist who developed the theory of relativity. He received the 1921 Nobel Prize in Physics for explaining the photoelectric effect.
Marie Curie|Marie Curie was a Polish and naturalised French physicist and chemist who researched radioactivity. She was the first woman to win a Nobel Prize and the only person to win Nobel Prizes in two different sciences, physics (1903) and chemistry (1911).
Charles Darwin|Charles Darwin was an English naturalist who proposed the theory of evolution by natural selection in On the Origin of Species, published in 1859. He sailed on HMS Beagle.
Galileo Galilei|Galileo Galilei was an Italian astronomer who improved the telescope and discovered the four largest moons of Jupiter in 1610.
Nicolaus Copernicus|Nicolaus Copernicus was a Polish astronomer who proposed that the Sun, not Earth, is at the centre of the universe.
Johannes Kepler|Johannes Kepler was a German astronomer known for his three laws of planetary motion.
Alexander Fleming|Alexander Fleming was a Scottish biologist who discovered penicillin, the first widely used antibiotic, in 1928.
Louis Pasteur|Louis Pasteur was a French chemist who developed pasteurisation and vaccines for rabies and anthrax.
Gregor Mendel|Gregor Mendel was an Augustinian friar who discovered the basic laws of heredity through experiments with pea plants.
Dmitri Mendeleev|Dmitri Mendeleev was a Russian chemist who created the first widely recognised periodic table of the elements in 1869.
Nikola Tesla|Nikola Tesla was a Serbian-American inventor known for his work on alternating current electricity.
Thomas Edison|Thomas Edison was an American inventor who developed the phonograph and a long-lasting practical electric light bulb.
Alexander Graham Bell|Alexander Graham Bell was a Scottish-born inventor credited with patenting the first practical telephone in 1876.
Wright brothers|Orville and Wilbur Wright made the first controlled, powered airplane flight on December 17, 1903, near Kitty Hawk, North Carolina.
Johannes Gutenberg|Johannes Gutenberg introduced printing with movable type to Europe around 1440 in Mainz, Germany.
James Watt|James Watt was a Scottish inventor whose improvements to the steam engine drove the Industrial Revolution. The watt, a unit of power, is named after him.
Michael Faraday|Michael Faraday was an English scientist who discovered electromagnetic induction in 1831.
James Clerk Maxwell|James Clerk Maxwell was a Scottish physicist who formulated the equations of electromagnetism.
Ada Lovelace|Ada Lovelace was an English mathematician who wrote the first published algorithm intended for Charles Babbage's Analytical Engine; she is often called the first computer programmer.
Alan Turing|Alan Turing was an English mathematician and computer scientist who formalised computation with the Turing machine and helped break the Enigma code during the Second World War.
Tim Berners-Lee|Tim Berners-Lee is an English computer scientist who invented the World Wide Web in 1989 while working at CERN.
Rosalind Franklin|Rosalind Franklin was an English chemist whose X-ray images of DNA were critical to discovering its double helix structure.
Watson and Crick|James Watson and Francis Crick described the double helix structure of DNA in 1953.
Stephen Hawking|Stephen Hawking was an English theoretical physicist known for his work on black holes and for the book A Brief History of Time.
Archimedes|Archimedes was a Greek mathematician from Syracuse known for the principle of buoyancy and for approximating pi.
Pythagoras|Pythagoras was a Greek philosopher; the Pythagorean theorem states that in a right triangle the square of the hypotenuse equals the sum of the squares of the other two sides.
Euclid|Euclid was a Greek mathematician whose Elements was a standard geometry textbook for over two thousand years.
Leonardo da Vinci|Leonardo da Vinci was an Italian Renaissance artist and inventor who painted the Mona Lisa and The Last Supper.
Michelangelo|Michelangelo was an Italian Renaissance artist who painted the ceiling of the Sistine Chapel and sculpted the statue of David.
Vincent van Gogh|Vincent van Gogh was a Dutch painter who created The Starry Night and Sunflowers.
Pablo Picasso|Pablo Picasso was a Spanish painter who co-founded Cubism and painted Guernica in 1937.
Claude Monet|Claude Monet was a French painter and a founder of Impressionism; his painting Impression, Sunrise gave the movement its name.
Frida Kahlo|Frida Kahlo was a Mexican painter known for her self-portraits.
Ludwig van Beethoven|Ludwig van Beethoven was a German composer who wrote nine symphonies; he continued to compose after becoming deaf.
Wolfgang Amadeus Mozart|Wolfgang Amadeus Mozart was an Austrian composer of the Classical period who wrote more than 600 works, including the opera The Magic Flute.
Johann Sebastian Bach|Johann Sebastian Bach was a German Baroque composer known for the Brandenburg Concertos.
Hamlet|Hamlet is a tragedy by William Shakespeare, set in Denmark, about Prince Hamlet's revenge for his father's murder.
Romeo and Juliet|Romeo and Juliet is a tragedy by William Shakespeare about two young lovers from feuding families in Verona.
William Shakespeare|William Shakespeare was an English playwright and poet born in Stratford-upon-Avon in 1564. He wrote Hamlet, Macbeth, Othello and King Lear.
Pride and Prejudice|Pride and Prejudice is a novel by Jane Austen published in 1813, following Elizabeth Bennet and Mr Darcy.
Nineteen Eighty-Four|Nineteen Eighty-Four is a dystopian novel by George Orwell published in 1949, featuring Big Brother and the Thought Police.
Animal Farm|Animal Farm is an allegorical novella by George Orwell published in 1945.
War and Peace|War and Peace is a novel by the Russian author Leo Tolstoy about Napoleon's invasion of Russia.
Crime and Punishment|Crime and Punishment is a novel by Fyodor Dostoevsky published in 1866.
Don Quixote|Don Quixote is a Spanish novel by Miguel de Cervantes, published in two parts in 1605 and 1615.
The Divine Comedy|The Divine Comedy is an Italian narrative poem by Dante Alighieri describing a journey through Hell, Purgatory and Paradise.
The Odyssey|The Odyssey is an ancient Greek epic poem attributed to Homer about Odysseus's journey home after the Trojan War.
Moby-Dick|Moby-Dick is a novel by Herman Melville published in 1851 about Captain Ahab's hunt for a white whale.
The Great Gatsby|The Great Gatsby is a novel by F. Scott Fitzgerald published in 1925, set in the Jazz Age on Long Island.
To Kill a Mockingbird|To Kill a Mockingbird is a novel by Harper Lee published in 1960; it won the Pulitzer Prize.
One Hundred Years of Solitude|One Hundred Years of Solitude is a novel by the Colombian author Gabriel Garcia Marquez, published in 1967.
The Lord of the Rings|The Lord of the Rings is a fantasy novel by J. R. R. Tolkien, published in three volumes in 1954 and 1955.
Harry Potter|The Harry Potter series of seven fantasy novels was written by the British author J. K. Rowling; the first book appeared in 1997.
Frankenstein|Frankenstein is a novel by Mary Shelley published in 1818 about the scientist Victor Frankenstein.
Alice's Adventures in Wonderland|Alice's Adventures in Wonderland is an 1865 novel by Lewis Carroll.
Eiffel Tower|The Eiffel Tower is a wrought-iron lattice tower in Paris, designed by the company of Gustave Eiffel and completed in 1889 for the World's Fair. It is about 330 metres tall.
Statue of Liberty|The Statue of Liberty in New York Harbor was a gift from France to the United States, dedicated in 1886.
Colosseum|The Colosseum is an ancient amphitheatre in Rome completed in 80 AD under the emperor Titus.
Great Pyramid of Giza|The Great Pyramid of Giza was built for the pharaoh Khufu around 2560 BC and is the oldest of the Seven Wonders of the Ancient World.
Taj Mahal|The Taj Mahal in Agra, India, is a white marble mausoleum built by the Mughal emperor Shah Jahan for his wife Mumtaz Mahal.
Machu Picchu|Machu Picchu is a 15th-century Inca citadel in the Andes mountains of Peru.
Stonehenge|Stonehenge is a prehistoric stone circle in Wiltshire, England.
Big Ben|Big Ben is the nickname of the great bell of the clock tower at the Palace of Westminster in London.
Sydney Opera House|The Sydney Opera House was designed by the Danish architect Jorn Utzon and opened in 1973.
Burj Khalifa|The Burj Khalifa in Dubai, opened in 2010, is the tallest building in the world at 828 metres.
Golden Gate Bridge|The Golden Gate Bridge is a suspension bridge in San Francisco that opened in 1937.
Mount Everest|Mount Everest, on the border of Nepal and China, is Earth's highest mountain above sea level at 8,849 metres. Edmund Hillary and Tenzing Norgay first reached its summit in 1953.
K2|K2, on the border of Pakistan and China, is the second highest mountain on Earth.
Kilimanjaro|Mount Kilimanjaro in Tanzania is the highest mountain in Africa at 5,895 metres.
Nile|The Nile is a river in northeastern Africa that flows into the Mediterranean Sea; it is often considered the longest river in the world.
Amazon River|The Amazon River in South America carries more water than any other river in the world.
Pacific Ocean|The Pacific Ocean is the largest and deepest ocean. The Mariana Trench in the Pacific is the deepest known point on Earth.
Atlantic Ocean|The Atlantic Ocean is the second largest ocean and separates the Americas from Europe and Africa.
Sahara|The Sahara is the largest hot desert in the world, covering much of North Africa.
Antarctica|Antarctica is the southernmost and coldest continent. Roald Amundsen's expedition reached the South Pole first, in December 1911.
Greenland|Greenland is the world's largest island that is not a continent.
Lake Baikal|Lake Baikal in Siberia, Russia, is the deepest and oldest freshwater lake in the world.
Great Barrier Reef|The Great Barrier Reef off Queensland, Australia, is the world's largest coral reef system.
Dead Sea|The Dead Sea is a salt lake bordered by Jordan, Israel and the West Bank; its shores are the lowest land on Earth.
World War I|World War I lasted from 1914 to 1918. It began after the assassination of Archduke Franz Ferdinand of Austria in Sarajevo.
World War II|World War II lasted from 1939 to 1945. It began with Germany's invasion of Poland and ended after the atomic bombings of Hiroshima and Nagasaki and the surrender of Japan.
French Revolution|The French Revolution began in 1789 with the storming of the Bastille on July 14.
American Civil War|The American Civil War was fought from 1861 to 1865; Abraham Lincoln was president during the war.
Fall of the Berlin Wall|The Berlin Wall, which divided East and West Berlin, fell on November 9, 1989.
Magna Carta|The Magna Carta was sealed by King John of England in 1215.
Christopher Columbus|Christopher Columbus was a Genoese explorer whose voyage in 1492, sponsored by Spain, reached the Americas.
Ferdinand Magellan|Ferdinand Magellan led the first expedition to circumnavigate the globe, which returned to Spain in 1522 after his death.
Napoleon Bonaparte|Napoleon Bonaparte was a French military leader who crowned himself Emperor of the French in 1804 and was defeated at Waterloo in 1815.
Julius Caesar|Julius Caesar was a Roman general and statesman who was assassinated on the Ides of March, 44 BC.
Cleopatra|Cleopatra VII was the last active ruler of the Ptolemaic Kingdom of Egypt.
Alexander the Great|Alexander the Great was a king of Macedon who created one of the largest empires of the ancient world; he was tutored by Aristotle.
Genghis Khan|Genghis Khan founded the Mongol Empire in 1206.
George Washington|George Washington was the first president of the United States, serving from 1789 to 1797.
Abraham Lincoln|Abraham Lincoln was the 16th president of the United States and issued the Emancipation Proclamation in 1863.
Nelson Mandela|Nelson Mandela was South Africa's first Black president, serving from 1994 to 1999, after 27 years in prison.
Mahatma Gandhi|Mahatma Gandhi led India's non-violent independence movement against British rule; India became independent in 1947.
Martin Luther King Jr.|Martin Luther King Jr. was an American civil rights leader who gave the "I Have a Dream" speech in 1963.
Winston Churchill|Winston Churchill was Prime Minister of the United Kingdom during most of World War II.
Queen Elizabeth II|Elizabeth II was Queen of the United Kingdom from 1952 until her death in 2022, the longest reign of any British monarch.
United Nations|The United Nations was founded in 1945 and has its headquarters in New York City.
European Union|The European Union is a political and economic union of European countries; the euro is used by most of its members.
Olympic Games|The modern Olympic Games were founded by Pierre de Coubertin; the first were held in Athens in 1896.
FIFA World Cup|The FIFA World Cup is an international football tournament held every four years; Brazil has won it five times. The first World Cup was held in Uruguay in 1930.
Human heart|The human heart has four chambers: two atria and two ventricles. It pumps blood through the circulatory system.
Human skeleton|The adult human skeleton has 206 bones. The femur, in the thigh, is the longest bone.
Blood|Red blood cells carry oxygen using the protein haemoglobin. White blood cells fight infection.
DNA|DNA, deoxyribonucleic acid, carries genetic instructions. Its four bases are adenine, thymine, guanine and cytosine.
Photosynthesis|Photosynthesis is the process by which plants use sunlight, water and carbon dioxide to make glucose and release oxygen. It takes place in chloroplasts.
Mitochondrion|The mitochondrion is often called the powerhouse of the cell because it produces ATP.
Penicillin|Penicillin is an antibiotic discovered by Alexander Fleming in 1928 from the mould Penicillium.
Insulin|Insulin is a hormone made by the pancreas that regulates blood sugar; it was first isolated in 1921 by Frederick Banting and Charles Best.
Vaccination|Edward Jenner developed the first vaccine, against smallpox, in 1796. Smallpox was declared eradicated in 1980.
Blue whale|The blue whale is the largest animal known to have ever lived, reaching about 30 metres in length.
African elephant|The African elephant is the largest living land animal.
Cheetah|The cheetah is the fastest land animal, reaching speeds of about 100 kilometres per hour.
Giraffe|The giraffe is the tallest living animal.
Penguin|Penguins are flightless birds that live almost exclusively in the Southern Hemisphere; the emperor penguin is the largest species.
Octopus|An octopus has eight arms and three hearts.
Honey bee|Honey bees communicate the location of flowers with a waggle dance.
Speed of light|The speed of light in a vacuum is exactly 299,792,458 metres per second.
Water|Water is a molecule made of two hydrogen atoms and one oxygen atom, H2O. At sea level it boils at 100 degrees Celsius and freezes at 0 degrees Celsius.
Absolute zero|Absolute zero, 0 kelvin, equals minus 273.15 degrees Celsius.
Gravity|The acceleration due to gravity at Earth's surface is about 9.8 metres per second squared.
Periodic table|The periodic table arranges the chemical elements by atomic number. It was first published by Dmitri Mendeleev in 1869.
Pi|Pi is the ratio of a circle's circumference to its diameter, approximately 3.14159.
Python (programming language)|Python is a programming language created by Guido van Rossum and first released in 1991.
Linux|Linux is an open-source operating system kernel first released by Linus Torvalds in 1991.
World Wide Web|The World Wide Web was invented by Tim Berners-Lee at CERN in 1989.
Internet|The Internet grew out of ARPANET, a network funded by the United States Department of Defense that first connected computers in 1969.
Apple Inc.|Apple was founded by Steve Jobs, Steve Wozniak and Ronald Wayne in 1976 in California.
Microsoft|Microsoft was founded by Bill Gates and Paul Allen in 1975.
Google|Google was founded by Larry Page and Sergey Brin in 1998 while they were PhD students at Stanford University.
Telephone|The telephone was patented by Alexander Graham Bell in 1876.
Transistor|The transistor was invented at Bell Labs in 1947 by John Bardeen, Walter Brattain and William Shockley.
Mona Lisa|The Mona Lisa is a portrait painted by Leonardo da Vinci; it hangs in the Louvre in Paris.
The Starry Night|The Starry Night is an 1889 painting by Vincent van Gogh, held by the Museum of Modern Art in New York.
Louvre|The Louvre in Paris is the world's most visited art museum and home of the Mona Lisa.
Olympus|Mount Olympus is the highest mountain in Greece and was the home of the gods in Greek mythology.
Zeus|Zeus was the king of the gods in Greek mythology; his Roman counterpart is Jupiter.
Chess|Chess is a two-player strategy board game played on an 8 by 8 board; each player starts with 16 pieces.
Basketball|Basketball was invented by James Naismith in 1891 in Springfield, Massachusetts.
Marathon|The marathon is a long-distance race of 42.195 kilometres, named after the legend of a runner from Marathon to Athens.
Tour de France|The Tour de France is an annual men's multiple-stage bicycle race held mainly in France since 1903.
Titanic|RMS Titanic sank in the North Atlantic on April 15, 1912, after hitting an iceberg on her maiden voyage from Southampton to New York.
Chernobyl disaster|The Chernobyl disaster was a nuclear accident at the Chernobyl power plant in Ukraine on April 26, 1986.
Panama Canal|The Panama Canal connects the Atlantic and Pacific Oceans and opened in 1914.
Suez Canal|The Suez Canal in Egypt connects the Mediterranean Sea to the Red Sea and opened in 1869.
Euro|The euro was introduced as an accounting currency in 1999 and as banknotes and coins in 2002.
Bitcoin|Bitcoin is a cryptocurrency described in a 2008 paper by the pseudonymous Satoshi Nakamoto.
Heptagon|A heptagon is a polygon with seven sides and seven angles. A hexagon has six sides and an octagon has eight.
Prime number|A prime number is a natural number greater than 1 whose only divisors are 1 and itself. The smallest prime number is 2, the only even prime.
Mandarin Chinese|Mandarin Chinese is the language with the most native speakers worldwide, more than 900 million. English has the most speakers in total when second-language speakers are counted.
2016 Summer Olympics|The 2016 Summer Olympics were hosted by Brazil in Rio de Janeiro, the first Olympic Games held in South America.
Diamond|Diamond is a form of carbon and the hardest natural mineral, rated 10 on the Mohs scale of hardness.
"""


def main() -> None:
    docs: list[dict[str, str]] = []
    for line in COUNTRIES.splitlines():
        name, capital, continent, language, currency, fact = line.split("|")
        docs.append(
            {
                "title": name,
                "text": f"{name} is a country in {continent}. Its capital is {capital}. "
                f"The official language is {language} and the currency is the {currency}. {fact}",
            }
        )
        docs.append({"title": capital, "text": f"{capital} is the capital city of {name}. {fact}"})
    for line in ELEMENTS.splitlines():
        name, symbol, number, fact = line.split("|")
        docs.append(
            {
                "title": name,
                "text": f"{name} is a chemical element with the symbol {symbol} and atomic number {number}. {fact}",
            }
        )
    for line in PASSAGES.splitlines():
        title, text = line.split("|", 1)
        docs.append({"title": title, "text": text})
    OUT.parent.mkdir(parents=True, exist_ok=True)
    with OUT.open("w", encoding="utf-8") as handle:
        for i, doc in enumerate(docs, 1):
            handle.write(json.dumps({"id": f"demo-{i:04d}", **doc}, ensure_ascii=False) + "\n")
    print(f"wrote {len(docs)} documents to {OUT}")


if __name__ == "__main__":
    main()
